# Seed 2 for 16_GELU_Scale_Bias: one fused elementwise kernel over the flat tensor: exact erf GELU, scale and the
# per-column bias in registers, so x is read once and the output written once.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_scale_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + offsets % n_cols, mask=mask, other=0.0)
    gelu = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offsets, gelu * scale + bias, mask=mask)


def gelu_scale_bias(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    gelu_scale_bias_kernel[(triton.cdiv(n_elements, 1024),)](x, bias, out, n_elements, x.shape[-1], scale, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)  # the same draw as the reference's, under the same seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_scale_bias(x, self.bias, self.scale)
