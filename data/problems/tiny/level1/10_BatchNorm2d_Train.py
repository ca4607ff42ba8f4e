import torch
import torch.nn as nn


class Model(nn.Module):
    """BatchNorm2d in training mode (batch statistics; running stats are updated as a side effect)."""

    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


# Tiny CPU twin of data/problems/suite/level1/10_BatchNorm2d_Train.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
channels = 4
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
