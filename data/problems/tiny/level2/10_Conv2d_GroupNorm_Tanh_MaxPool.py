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


# Tiny CPU twin of data/problems/suite/level2/10_Conv2d_GroupNorm_Tanh_MaxPool.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
in_channels = 3
out_channels = 8
kernel_size = 3
num_groups = 2
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
