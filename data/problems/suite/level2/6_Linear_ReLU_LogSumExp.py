import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, ReLU, then log-sum-exp over the features (one value per row)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.linear(x))
        return torch.logsumexp(x, dim=1, keepdim=True)


# Estimate: 2 * 16384 * 2048 * 4096 = 275 GFLOP at ~50 TFLOP/s = ~5.5 ms; relu and logsumexp move ~1 GiB = ~0.25 ms.
# Measured: 6.19 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
in_features = 2048
out_features = 4096


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
