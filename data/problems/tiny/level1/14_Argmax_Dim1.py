import torch
import torch.nn as nn


class Model(nn.Module):
    """Index of the maximum over dimension 1 (int64 output)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


# Tiny CPU twin of data/problems/suite/level1/14_Argmax_Dim1.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 4
reduce_size = 64
inner = 16


def get_inputs():
    return [torch.rand(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [1]
