import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B where A is tall (many rows) and B has few columns."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


# Tiny CPU twin of data/problems/suite/level1/2_GEMM_TallSkinny.py: same Model, shapes small enough for Triton's interpreter.
m = 128
k = 32
n = 16


def get_inputs():
    return [torch.rand(m, k), torch.rand(k, n)]


def get_init_inputs():
    return []
