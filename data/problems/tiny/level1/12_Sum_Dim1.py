import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over dimension 1 of a 3-D tensor, keeping the dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


# Tiny CPU twin of data/problems/suite/level1/12_Sum_Dim1.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 4
reduce_size = 64
inner = 16


def get_inputs():
    return [torch.rand(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [1]
