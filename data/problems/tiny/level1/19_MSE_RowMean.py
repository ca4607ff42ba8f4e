import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean squared error per row: mean over the last dimension of (pred - target)^2."""

    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, target, reduction="none").mean(dim=-1)


# Tiny CPU twin of data/problems/suite/level1/19_MSE_RowMean.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
