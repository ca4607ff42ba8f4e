import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for two square fp32 matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


# Estimate: 2 * 4096^3 = 137 GFLOP at ~50 TFLOP/s (fp32, no TF32) = ~2.7 ms; 192 MiB of traffic is negligible.
# Measured: 2.75 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
n = 4096


def get_inputs():
    return [torch.rand(n, n), torch.rand(n, n)]


def get_init_inputs():
    return []
