import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for two square fp16 matrices (tensor cores, fp32 accumulation in cuBLAS)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


# Estimate: 2 * 8192^3 = 1.1 TFLOP at ~700 TFLOP/s (dense fp16) = ~1.6 ms.
# Measured: 1.54 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
# randn rather than rand: with rand every entry is ~K/4 +- 1%, which a constant matches at fp16's 1e-2 tolerance.
n = 8192


def get_inputs():
    return [torch.randn(n, n, dtype=torch.float16), torch.randn(n, n, dtype=torch.float16)]


def get_init_inputs():
    return []
