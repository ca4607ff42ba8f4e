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


# Tiny CPU twin of data/problems/suite/level1/17_Clamp_Tanh_Chain.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64
gain = 4.0
shift = 2.0
lo = -1.0
hi = 1.5


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [gain, shift, lo, hi]
