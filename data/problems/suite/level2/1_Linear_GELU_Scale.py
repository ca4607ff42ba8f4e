import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear layer (with bias), tanh-approximate GELU, then multiply by a constant."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = F.gelu(y, approximate="tanh")
        return y * self.scale


# Estimate: 2 * 8192 * 4096 * 4096 = 275 GFLOP at ~50 TFLOP/s = ~5.5 ms; the tail (gelu, mul) moves 0.5 GiB = ~0.1 ms.
# Measured: 5.74 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 8192
in_features = 4096
out_features = 4096
scale = 1.5


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
