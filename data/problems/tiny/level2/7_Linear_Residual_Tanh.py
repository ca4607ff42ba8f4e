import torch
import torch.nn as nn


class Model(nn.Module):
    """Square linear layer with a residual connection, then alpha * tanh."""

    def __init__(self, features: int, alpha: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) + x
        return torch.tanh(y) * self.alpha


# Tiny CPU twin of data/problems/suite/level2/7_Linear_Residual_Tanh.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
features = 32
alpha = 0.8


def get_inputs():
    return [torch.rand(batch_size, features)]


def get_init_inputs():
    return [features, alpha]
