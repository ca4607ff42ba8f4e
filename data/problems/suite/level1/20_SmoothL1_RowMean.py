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


# Estimate: pred and target are 24576 x 16384 fp32 = 1.5 GiB each; loss (2r+w) then mean (r): ~6 GiB = ~1.5 ms.
# Measured: 1.52 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
# randn inputs so that |pred - target| falls on both sides of beta.
batch_size = 24576
dim = 16384
beta = 0.5


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [beta]
