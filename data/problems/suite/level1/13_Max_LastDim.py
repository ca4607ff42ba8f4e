import torch
import torch.nn as nn


class Model(nn.Module):
    """Maximum value over the last dimension."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


# Estimate: one read of x (120 x 4096 x 2048 fp32 = 3.75 GiB) at 4.3 TB/s = ~0.95 ms, ~1 ms at 90%.
# Measured: 1.19 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
# randn rather than rand: the max of 2048 uniforms is 1 - O(5e-4) everywhere, too close to a constant.
batch_size = 120
rows = 4096
reduce_size = 2048


def get_inputs():
    return [torch.randn(batch_size, rows, reduce_size)]


def get_init_inputs():
    return [-1]
