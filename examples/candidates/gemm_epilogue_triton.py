# Candidate for data/problems/tiny/level2/1_Linear_GELU_Scale.py (also valid for the suite version).
# The honest "library GEMM + fused Triton epilogue": the matmul stays in torch (cuBLAS), and bias + tanh-GELU +
# scale run as ONE Triton kernel over the GEMM output instead of three eager kernels.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_tanh_scale_kernel(y_ptr, bias_ptr, out_ptr, n_rows, n_cols, scale,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offsets = rows[:, None] * n_cols + cols[None, :]
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    y = y + tl.load(bias_ptr + cols, mask=cols < n_cols, other=0.0)[None, :]
    # tanh(u) = 1 - 2 / (exp(2u) + 1): exact at both tails (exp overflow gives 1, underflow gives -1).
    u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tanh_u) * scale, mask=mask)


def bias_gelu_tanh_scale(y: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """gelu_tanh(y + bias) * scale for a 2-D y, bias broadcast over rows."""
    y = y.contiguous()
    out = torch.empty_like(y)
    n_rows, n_cols = y.shape
    block_m, block_n = 32, 64
    grid = (triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, block_n))
    bias_gelu_tanh_scale_kernel[grid](y, bias, out, n_rows, n_cols, scale, BLOCK_M=block_m, BLOCK_N=block_n)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x, self.linear.weight.t())  # library GEMM without the bias: the bias is fused below
        return bias_gelu_tanh_scale(y, self.linear.bias, self.scale)
