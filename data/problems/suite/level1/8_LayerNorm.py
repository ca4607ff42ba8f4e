import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with learnable weight and bias."""

    def __init__(self, normalized_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


# Estimate: x is 65536 x 8192 fp32 = 2 GiB; one fused read (+ a cached re-read) and one write: ~4-5 GiB = ~1-1.2 ms.
# Measured: 1.63 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 65536
dim = 8192


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim]
