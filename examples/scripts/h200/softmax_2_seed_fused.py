# Seed 2 for 23_Softmax: one program per row with the whole row in registers: one read of x, one write.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2d)
        n_rows, n_cols = x2d.shape
        softmax_row_kernel[(n_rows,)](x2d, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out.view(x.shape)
