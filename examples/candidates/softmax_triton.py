# Candidate for data/problems/tiny/level1/23_Softmax.py (also valid for data/problems/suite/level1/23_Softmax.py).
# Row softmax, one program per row, the whole row in one block; subtracting the row max keeps exp() finite.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, numerator / denominator, mask=mask)


def softmax_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a tensor of any rank."""
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    block_size = triton.next_power_of_2(n_cols)
    softmax_row_kernel[(n_rows,)](x2d, out, n_cols, x2d.stride(0), out.stride(0), BLOCK_SIZE=block_size)
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_last_dim(x)
