import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B^T, with B stored row-major as (N, K)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.transpose(0, 1))


# Tiny CPU twin of data/problems/suite/level1/4_Matmul_TransposedB.py: same Model, shapes small enough for Triton's interpreter.
m = 32
n = 16
k = 64


def get_inputs():
    return [torch.rand(m, k), torch.rand(n, k)]


def get_init_inputs():
    return []
