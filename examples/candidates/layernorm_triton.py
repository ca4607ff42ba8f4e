# Candidate for data/problems/tiny/level1/8_LayerNorm.py (also valid for data/problems/suite/level1/8_LayerNorm.py).
# One program per row; mean and variance from the row held in registers (two-pass, so no cancellation).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_row_kernel(x_ptr, weight_ptr, bias_ptr, out_ptr, n_cols, row_stride, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    variance = tl.sum(centered * centered, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(variance + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * row_stride + cols, centered * rstd * weight + bias, mask=mask)


def layernorm_last_dim(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension with an elementwise affine."""
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    block_size = triton.next_power_of_2(n_cols)
    layernorm_row_kernel[(n_rows,)](x2d, weight, bias, out, n_cols, x2d.stride(0), eps, BLOCK_SIZE=block_size)
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_last_dim(x, self.norm.weight, self.norm.bias, self.norm.eps)
