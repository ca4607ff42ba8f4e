import torch
import torch.nn as nn


class Model(nn.Module):
    """DELIBERATELY DEGENERATE: ReLU on torch.rand inputs, which are in [0, 1), so it is the identity."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


# A fixture for degeneracy detection: returning x (or x.clone()) passes every trial on rand inputs, and fails
# on signed ones.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
