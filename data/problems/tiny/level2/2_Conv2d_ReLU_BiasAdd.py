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


# Tiny CPU twin of data/problems/suite/level2/2_Conv2d_ReLU_BiasAdd.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
in_channels = 3
out_channels = 8
kernel_size = 3
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
