import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with learnable weight and bias."""

    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


# Tiny CPU twin of data/problems/suite/level1/8_LayerNorm.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim]
