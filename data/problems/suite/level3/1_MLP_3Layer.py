import torch
import torch.nn as nn


class Model(nn.Module):
    """Three-layer perceptron: Linear-ReLU-Linear-ReLU-Linear."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden_features),
            nn.ReLU(),
            nn.Linear(hidden_features, hidden_features),
            nn.ReLU(),
            nn.Linear(hidden_features, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# Estimate: 2 * 1024 * (4096*8192 + 8192*8192 + 8192*1024) = 223 GFLOP at ~50 TFLOP/s = ~4.5 ms; the weights
# (436 MiB) and activations (~100 MiB) add ~0.1 ms.
# Measured: 4.61 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 1024
in_features = 4096
hidden_features = 8192
out_features = 1024


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
