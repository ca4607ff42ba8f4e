import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear layer (with bias), tanh-approximate GELU, then multiply by a constant."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = F.gelu(y, approximate="tanh")
        return y * self.scale


# Tiny CPU twin of data/problems/suite/level2/1_Linear_GELU_Scale.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
in_features = 64
out_features = 32
scale = 1.5


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
