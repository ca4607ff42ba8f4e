import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Smooth L1 (Huber-style) loss per row, with a configurable beta, averaged over the last dimension."""

    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(pred, target, beta=self.beta, reduction="none").mean(dim=-1)


# Tiny CPU twin of data/problems/suite/level1/20_SmoothL1_RowMean.py: same Model, shapes small enough for Triton's interpreter.
# randn inputs so that |pred - target| falls on both sides of beta.
batch_size = 16
dim = 64
beta = 0.5


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [beta]
