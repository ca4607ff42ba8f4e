import torch
import torch.nn as nn


class Model(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, plus the identity, then ReLU (BN in training mode)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


# Tiny CPU twin of data/problems/suite/level3/3_ResNetBasicBlock.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 2
channels = 8
height = 8
width = 8


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
