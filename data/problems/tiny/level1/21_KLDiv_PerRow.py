import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """KL(p || q) per row, with p = softmax(p_logits) and q = softmax(q_logits) over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
        log_q = F.log_softmax(q_logits, dim=-1)
        p = F.softmax(p_logits, dim=-1)
        return F.kl_div(log_q, p, reduction="none").sum(dim=-1)


# Tiny CPU twin of data/problems/suite/level1/21_KLDiv_PerRow.py: same Model, shapes small enough for Triton's interpreter.
batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
