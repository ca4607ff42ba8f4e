import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean squared error per row: mean over the last dimension of (pred - target)^2."""

    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, target, reduction="none").mean(dim=-1)


# Estimate: pred and target are 24576 x 16384 fp32 = 1.5 GiB each; the loss reads both and writes 1.5 GiB, the
# mean reads it back: ~6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 1.50 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 24576
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
