# 8_LayerNorm, tiling: the persistent row loop with 16 warps per program, so a row of 8192 is 16 values per thread
# (x, centered, weight and bias held without spills) and the two reductions are shorter; 2 programs per SM.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_persistent_kernel(x_ptr, weight_ptr, bias_ptr, out_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        centered = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
        tl.store(out_ptr + row * n_cols + cols, centered * rstd * weight + bias, mask=mask)


def launch_shape(n_cols: int) -> tuple[int, int]:
    """(num_warps, programs per SM): about 16 values per thread, at most 64 warps per SM."""
    block = triton.next_power_of_2(n_cols)
    num_warps = max(1, min(16, block // 512))
    return num_warps, max(1, 64 // num_warps // 2)


def layernorm_last_dim(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    num_warps, per_sm = launch_shape(n_cols)
    sms = torch.cuda.get_device_properties(x2d.device).multi_processor_count if x2d.is_cuda else 4
    grid = (min(n_rows, sms * per_sm),)
    layernorm_persistent_kernel[grid](x2d, weight, bias, out, n_rows, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps)
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_last_dim(x, self.norm.weight, self.norm.bias, self.norm.eps)
