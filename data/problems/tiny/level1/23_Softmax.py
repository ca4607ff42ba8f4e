import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


# Tiny CPU twin of data/problems/suite/level1/23_Softmax.py: same Model, shapes small enough for Triton's interpreter.
# randn rather than rand: with rand, 8192-wide rows give every output ~1.2e-4 +- 40%, close to atol (1e-4).
batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
