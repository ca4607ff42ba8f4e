import torch
import torch.nn as nn


class Model(nn.Module):
    """Affine map, clamp to [lo, hi], then tanh(y) + y."""

    def __init__(self, gain: float, shift: float, lo: float, hi: float):
        super().__init__()
        self.gain = gain
        self.shift = shift
        self.lo = lo
        self.hi = hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.gain - self.shift
        y = torch.clamp(y, min=self.lo, max=self.hi)
        return torch.tanh(y) + y


# Estimate: x is 16384 x 16384 fp32 = 1 GiB; mul, sub, clamp, tanh (r+w each) and add (2r+w) = ~11 GiB
# at 4.3 TB/s = ~2.7 ms.
# Measured: 2.79 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
dim = 16384
gain = 4.0
shift = 2.0
lo = -1.0
hi = 1.5


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [gain, shift, lo, hi]
