import torch
import torch.nn as nn


class Model(nn.Module):
    """Three-layer perceptron: Linear-ReLU-Linear-ReLU-Linear."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden_features),
            nn.ReLU(),
            nn.Linear(hidden_features, hidden_features),
            nn.ReLU(),
            nn.Linear(hidden_features, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# Tiny CPU twin of data/problems/suite/level3/1_MLP_3Layer.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 8
in_features = 32
hidden_features = 64
out_features = 16


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
