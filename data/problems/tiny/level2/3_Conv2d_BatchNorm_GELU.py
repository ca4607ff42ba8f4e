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


# Tiny CPU twin of data/problems/suite/level2/3_Conv2d_BatchNorm_GELU.py: same Model, shapes small enough for Triton's interpreter.
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
