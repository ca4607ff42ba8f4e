# Candidate for data/problems/tiny/level1/16_GELU_Scale_Bias.py (also valid for the suite version).
# Exact GELU, scale and per-column bias in one pass: one read of x, one write, instead of three of each.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_scale_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + offsets % n_cols, mask=mask, other=0.0)
    gelu = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offsets, gelu * scale + bias, mask=mask)


def gelu_scale_bias(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """gelu(x) * scale + bias, with bias broadcast over the last dimension of x."""
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    block_size = 1024
    grid = (triton.cdiv(n_elements, block_size),)
    gelu_scale_bias_kernel[grid](x, bias, out, n_elements, x.shape[-1], scale, BLOCK_SIZE=block_size)
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)  # same draw as Model, so the same values under a seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_scale_bias(x, self.bias, self.scale)
