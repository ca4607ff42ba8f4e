# 8_LayerNorm, parallel mapping: a persistent grid of a few programs per SM striding over the rows; weight and bias
# are loaded once per program instead of once per row.
import torch
import torch.nn as nn
import triton
import triton.language as tl

PROGRAMS_PER_SM = 4


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


def layernorm_last_dim(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2d)
    n_rows, n_cols = x2d.shape
    sms = torch.cuda.get_device_properties(x2d.device).multi_processor_count if x2d.is_cuda else 4
    grid = (min(n_rows, sms * PROGRAMS_PER_SM),)
    layernorm_persistent_kernel[grid](x2d, weight, bias, out, n_rows, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
    return out.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_last_dim(x, self.norm.weight, self.norm.bias, self.norm.eps)
