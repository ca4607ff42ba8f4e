import torch
import torch.nn as nn


class Model(nn.Module):
    """Maximum value over the last dimension."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


# Tiny CPU twin of data/problems/suite/level1/13_Max_LastDim.py: same Model, shapes small enough for Triton's interpreter.
# randn rather than rand: the max of 2048 uniforms is 1 - O(5e-4) everywhere, too close to a constant.
batch_size = 4
rows = 16
reduce_size = 64


def get_inputs():
    return [torch.randn(batch_size, rows, reduce_size)]


def get_init_inputs():
    return [-1]
