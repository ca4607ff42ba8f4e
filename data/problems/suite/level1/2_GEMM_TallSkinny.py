import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B where A is tall (many rows) and B has few columns."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


# Estimate: 2 * 65536 * 4096 * 256 = 137 GFLOP at ~50 TFLOP/s = ~2.7 ms; reading A (1 GiB) alone is ~0.25 ms.
# Measured: 2.84 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
m = 65536
k = 4096
n = 256


def get_inputs():
    return [torch.rand(m, k), torch.rand(k, n)]


def get_init_inputs():
    return []
