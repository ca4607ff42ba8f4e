# Seed 2 for 8_LayerNorm: one fused kernel, one program per row with the whole row in registers; mean, variance
# (two-pass over the registers, no cancellation) and the affine in one read of x and one write.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_row_kernel(x_ptr, weight_ptr, bias_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, centered * rstd * weight + bias, mask=mask)


def layernorm_last_dim(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    layernorm_row_kernel[(n_rows,)](x2d, weight, bias, out, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_last_dim(x, self.norm.weight, self.norm.bias, self.norm.eps)
