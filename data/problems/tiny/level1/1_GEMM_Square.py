import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for two square fp32 matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


# Tiny CPU twin of data/problems/suite/level1/1_GEMM_Square.py: same Model, shapes small enough for Triton's interpreter.
n = 32


def get_inputs():
    return [torch.rand(n, n), torch.rand(n, n)]


def get_init_inputs():
    return []
