import torch
import torch.nn as nn


class Model(nn.Module):
    """DELIBERATELY DEGENERATE: the mean of a row minus its own mean, which is ~1e-8 for any input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(dim=-1, keepdim=True)).mean(dim=-1)


# A fixture for degeneracy detection: torch.zeros of the right shape passes allclose at atol=1e-4.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
