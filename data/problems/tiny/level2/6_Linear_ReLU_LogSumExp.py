import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, ReLU, then log-sum-exp over the features (one value per row)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.linear(x))
        return torch.logsumexp(x, dim=1, keepdim=True)


# Tiny CPU twin of data/problems/suite/level2/6_Linear_ReLU_LogSumExp.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
in_features = 32
out_features = 64


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
