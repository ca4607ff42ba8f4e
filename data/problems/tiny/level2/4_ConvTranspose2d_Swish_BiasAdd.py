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


# Tiny CPU twin of data/problems/suite/level2/4_ConvTranspose2d_Swish_BiasAdd.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
in_channels = 4
out_channels = 3
kernel_size = 4
stride = 2
padding = 1
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
