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


# Estimate: two convs of 2 * 64 * 64 * 128^2 * 64 * 9 = 77 GFLOP each in TF32 = ~0.6 ms; the 256 MiB
# activations make ~15 passes (conv writes, BN 3 each, ReLUs, the add) = ~3.75 GiB = ~0.9 ms: ~1.5 ms.
# Measured: 2.76 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 64
channels = 64
height = 128
width = 128


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
