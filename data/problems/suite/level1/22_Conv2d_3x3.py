import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D convolution, 3x3 kernel, stride 1, 'same' padding, with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


# Estimate: 2 * 32 * 128 * 256^2 * 64 * 9 = 309 GFLOP; cuDNN uses TF32 (~400 TFLOP/s peak, ~60% reached) =
# ~1.3 ms, plus writing the 1 GiB output = ~0.25 ms: ~1.5 ms.
# Measured: 2.81 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
height = 256
width = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
