import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm over channel groups of an NCHW tensor, with learnable affine parameters."""

    def __init__(self, num_groups: int, num_channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, num_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


# Tiny CPU twin of data/problems/suite/level1/11_GroupNorm.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
num_groups = 2
channels = 8
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
