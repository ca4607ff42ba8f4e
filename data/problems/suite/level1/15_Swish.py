import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish (SiLU) written as x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


# Estimate: x is 16384 x 16384 fp32 = 1 GiB; sigmoid (r+w) then mul (2r+w) = ~5 GiB at 4.3 TB/s = ~1.25 ms.
# Measured: 1.26 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
