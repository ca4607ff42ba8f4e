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


# Tiny CPU twin of data/problems/suite/level1/16_GELU_Scale_Bias.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64
scale = 1.7


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim, scale]
