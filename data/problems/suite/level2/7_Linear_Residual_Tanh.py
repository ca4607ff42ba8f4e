import torch
import torch.nn as nn


class Model(nn.Module):
    """Square linear layer with a residual connection, then alpha * tanh."""

    def __init__(self, features: int, alpha: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) + x
        return torch.tanh(y) * self.alpha


# Estimate: 2 * 8192 * 4096 * 4096 = 275 GFLOP at ~50 TFLOP/s = ~5.5 ms; add, tanh, mul move ~1 GiB = ~0.25 ms.
# Measured: 5.77 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 8192
features = 4096
alpha = 0.8


def get_inputs():
    return [torch.rand(batch_size, features)]


def get_init_inputs():
    return [features, alpha]
