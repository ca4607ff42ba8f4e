import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cross-entropy loss per sample (no reduction) from logits and integer class targets."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")


# Tiny CPU twin of data/problems/suite/level1/18_CrossEntropy_PerSample.py: same Model, shapes small enough for Triton's interpreter.
# Per-sample output on purpose: a mean over 65536 samples is nearly the same number for every input.
batch_size = 16
num_classes = 64


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
