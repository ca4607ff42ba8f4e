import torch
import torch.nn as nn


class Model(nn.Module):
    """Index of the maximum over dimension 1 (int64 output)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


# Estimate: one read of x (120 x 2048 x 4096 fp32 = 3.75 GiB) at 4.3 TB/s = ~0.95 ms, ~1 ms at 90%.
# Measured: 1.20 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 120
reduce_size = 2048
inner = 4096


def get_inputs():
    return [torch.rand(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [1]
