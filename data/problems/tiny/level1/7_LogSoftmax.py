import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the last dimension."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


# Tiny CPU twin of data/problems/suite/level1/7_LogSoftmax.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1]
