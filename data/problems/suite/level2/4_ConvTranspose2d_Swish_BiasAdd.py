import torch
import torch.nn as nn


class Model(nn.Module):
    """Stride-2 transposed convolution (2x upsampling), Swish, then add a learnable per-channel bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_t(x)
        x = x * torch.sigmoid(x)
        return x + self.bias


# Estimate: 2 * 64 * 64 * 32 * 4^2 * 128^2 = 69 GFLOP in TF32 = ~0.3 ms; the 512 MiB output goes through
# write, sigmoid (r+w), mul (2r+w), add (r+w) = ~4 GiB = ~1 ms: ~1.3 ms.
# Measured: 2.60 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 64
in_channels = 64
out_channels = 32
kernel_size = 4
stride = 2
padding = 1
height = 128
width = 128


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
