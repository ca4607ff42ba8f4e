import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cross-entropy loss per sample (no reduction) from logits and integer class targets."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")


# Estimate: logits are 65536 x 8192 fp32 = 2 GiB; log_softmax reads ~2x and writes once, nll reads a
# gathered column: ~6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 1.93 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
# Per-sample output on purpose: a mean over 65536 samples is nearly the same number for every input.
batch_size = 65536
num_classes = 8192


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
