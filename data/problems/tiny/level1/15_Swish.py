import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish (SiLU) written as x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


# Tiny CPU twin of data/problems/suite/level1/15_Swish.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
