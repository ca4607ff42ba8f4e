import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear layer, LayerNorm over the features, then Swish (SiLU)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = self.norm(x)
        return F.silu(x)


# Tiny CPU twin of data/problems/suite/level2/5_Linear_LayerNorm_Swish.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
in_features = 32
out_features = 64


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
