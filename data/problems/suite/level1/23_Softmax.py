import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


# Estimate: x is 65536 x 8192 fp32 = 2 GiB; eager reads it ~2x (max/sum, then normalize) and writes once:
# ~6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 2.21 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
# randn rather than rand: with rand, 8192-wide rows give every output ~1.2e-4 +- 40%, close to atol (1e-4).
batch_size = 65536
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
