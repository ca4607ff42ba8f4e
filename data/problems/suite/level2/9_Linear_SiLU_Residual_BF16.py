import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """bf16 square linear layer, SiLU, plus the input (residual)."""

    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.linear(x)) + x


# Estimate: 2 * 32768 * 4096 * 4096 = 1.1 TFLOP at ~650 TFLOP/s (dense bf16) = ~1.7 ms; SiLU and the add move
# ~1.25 GiB of bf16 = ~0.3 ms: ~2 ms.
# Measured: 1.87 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32768
features = 4096


def get_inputs():
    return [torch.rand(batch_size, features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [features]
