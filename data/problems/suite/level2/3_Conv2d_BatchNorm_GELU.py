import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """3x3 convolution, BatchNorm2d in training mode, then exact GELU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = self.bn(x)
        return F.gelu(x)


# Estimate: conv 2 * 64 * 64 * 256^2 * 32 * 9 = 155 GFLOP in TF32 = ~0.6 ms; the 1 GiB conv output is written
# once, then BN (~3 passes) and GELU (2 passes): ~6 GiB = ~1.5 ms: ~2 ms.
# Measured: 5.10 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 64
in_channels = 32
out_channels = 64
kernel_size = 3
height = 256
width = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
