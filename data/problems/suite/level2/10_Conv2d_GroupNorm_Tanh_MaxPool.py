import torch
import torch.nn as nn


class Model(nn.Module):
    """3x3 convolution, GroupNorm, tanh, then 2x2 max pooling."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = self.norm(x)
        x = torch.tanh(x)
        return self.pool(x)


# Estimate: conv 2 * 32 * 64 * 256^2 * 32 * 9 = 77 GFLOP in TF32 = ~0.3 ms; the 512 MiB conv output is written,
# GroupNorm (~3 passes), tanh (2), pool (1.25): ~7 passes = ~3.6 GiB = ~0.9 ms: ~1.2 ms.
# Measured: 2.84 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32
in_channels = 32
out_channels = 64
kernel_size = 3
num_groups = 8
height = 256
width = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
