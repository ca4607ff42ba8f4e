# Seed 1 for 16_GELU_Scale_Bias: the chain as written, one elementwise kernel per operation (exact erf GELU, the
# scale, the per-column bias), each over the flat tensor. Naive but honest: three reads and three writes of x's size.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) * scale, mask=mask)


@triton.jit
def add_column_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + offsets % n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x + bias, mask=mask)


def gelu_scale_bias(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    x = x.contiguous()
    gelu, scaled, out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    n_elements = x.numel()
    grid = (triton.cdiv(n_elements, 1024),)
    gelu_kernel[grid](x, gelu, n_elements, BLOCK=1024)
    scale_kernel[grid](gelu, scaled, n_elements, scale, BLOCK=1024)
    add_column_bias_kernel[grid](scaled, bias, out, n_elements, x.shape[-1], BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)  # the same draw as the reference's, under the same seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_scale_bias(x, self.bias, self.scale)
