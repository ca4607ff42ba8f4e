import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product y = A @ x, with x a (K, 1) column."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


# Estimate: memory bound, one read of A (40960 x 28672 fp32 = 4.4 GiB) at 4.3 TB/s = ~1.1 ms.
# Measured at m = 36864: 1.02 ms, then 0.99 ms (under the suite's 1 ms floor) eager on an H200 (torch 2.11+cu130,
# CUDA events, L2 flushed, 2026-11-29); m raised to 40960 for that: 1.10 ms (bench/results/2026-11-29-s2).
m = 40960
k = 28672


def get_inputs():
    return [torch.rand(m, k), torch.rand(k, 1)]


def get_init_inputs():
    return []
