import torch
import torch.nn as nn


class Model(nn.Module):
    """3x3 convolution, ReLU, then add a learnable per-channel bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.relu(x)
        return x + self.bias


# Estimate: conv 2 * 32 * 128 * 256^2 * 64 * 9 = 309 GFLOP in TF32 = ~1.3 ms; the 1 GiB output is written by the
# conv, then read and written by relu and by the add (~5 GiB) = ~1.2 ms: ~2.5 ms.
# Measured: 4.12 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
height = 256
width = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
