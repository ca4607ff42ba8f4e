# Seed 1 for 8_LayerNorm: two kernels. The first loops over each row in blocks for the mean, then again for the
# variance (two-pass, no cancellation) and writes mean and 1/std per row; the second normalizes on a 2D grid.
# Naive but honest: x is read three times and the two launches cannot share anything.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_stats_kernel(x_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.load(x_row + cols, mask=cols < n_cols, other=0.0), axis=0)
    mean = total / n_cols
    squares = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        centered = tl.where(cols < n_cols, x - mean, 0.0)
        squares += tl.sum(centered * centered, axis=0)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(squares / n_cols + eps))


@triton.jit
def layernorm_apply_kernel(x_ptr, mean_ptr, rstd_ptr, weight_ptr, bias_ptr, out_ptr, n_rows, n_cols,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    offsets = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
    weight = tl.load(weight_ptr + cols, mask=col_mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=col_mask, other=0.0)
    y = (x - mean[:, None]) * rstd[:, None] * weight[None, :] + bias[None, :]
    tl.store(out_ptr + offsets, y, mask=mask)


def layernorm_last_dim(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    mean = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    rstd = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    layernorm_stats_kernel[(n_rows,)](x2d, mean, rstd, n_cols, eps, BLOCK=512)
    grid = (triton.cdiv(n_rows, 4), triton.cdiv(n_cols, 256))
    layernorm_apply_kernel[grid](x2d, mean, rstd, weight, bias, out, n_rows, n_cols, BLOCK_M=4, BLOCK_N=256)
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_last_dim(x, self.norm.weight, self.norm.bias, self.norm.eps)
