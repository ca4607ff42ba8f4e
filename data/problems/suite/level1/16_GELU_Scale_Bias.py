import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Exact (erf) GELU, times a constant, plus a learnable per-column bias."""

    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * self.scale + self.bias


# Estimate: x is 16384 x 16384 fp32 = 1 GiB; gelu, mul, add each read and write it = ~6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 1.79 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
dim = 16384
scale = 1.7


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim, scale]
