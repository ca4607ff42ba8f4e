import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product y = A @ x, with x a (K, 1) column."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


# Tiny CPU twin of data/problems/suite/level1/5_GEMV.py: same Model, shapes small enough for Triton's interpreter.
m = 64
k = 128


def get_inputs():
    return [torch.rand(m, k), torch.rand(k, 1)]


def get_init_inputs():
    return []
