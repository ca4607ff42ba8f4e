import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, BatchNorm1d in training mode (batch statistics), then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = self.bn(x)
        return torch.relu(x)


# Estimate: 2 * 16384 * 2048 * 4096 = 275 GFLOP at ~50 TFLOP/s = ~5.5 ms; BN and ReLU move ~1.25 GiB = ~0.3 ms.
# Measured: 5.94 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
in_features = 2048
out_features = 4096


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
