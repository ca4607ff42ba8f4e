import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, BatchNorm1d in training mode (batch statistics), then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = self.bn(x)
        return torch.relu(x)


# Tiny CPU twin of data/problems/suite/level2/11_Linear_BatchNorm1d_ReLU.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
in_features = 32
out_features = 64


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
