# 16_GELU_Scale_Bias, parallel mapping: a 2D grid of (row block, column block) tiles instead of a flat 1D grid, so
# each program loads its bias slice once and broadcasts it over its rows (no per-element modulo), with 4096
# elements per program instead of 1024.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_scale_bias_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    offsets = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=col_mask, other=0.0)
    gelu = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offsets, gelu * scale + bias[None, :], mask=mask)


def gelu_scale_bias(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    block_m, block_n = 16, 256
    grid = (triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, block_n))
    gelu_scale_bias_kernel[grid](x2d, bias, out, n_rows, n_cols, scale, BLOCK_M=block_m, BLOCK_N=block_n)
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)  # the same draw as the reference's, under the same seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_scale_bias(x, self.bias, self.scale)
