import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the last dimension."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


# Estimate: x is 32768 x 16384 fp32 = 2 GiB; eager reads it ~2x and writes once: ~6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 1.28 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32768
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1]
