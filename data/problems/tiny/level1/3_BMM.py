import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiply: C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


# Tiny CPU twin of data/problems/suite/level1/3_BMM.py: same Model, shapes small enough for Triton's interpreter.
batch = 2
m = 16
k = 32
n = 16


def get_inputs():
    return [torch.rand(batch, m, k), torch.rand(batch, k, n)]


def get_init_inputs():
    return []
