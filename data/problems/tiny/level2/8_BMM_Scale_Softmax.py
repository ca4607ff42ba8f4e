import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention scores: softmax(Q @ K^T * scale) over the key dimension, for a batch of heads."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        return torch.softmax(scores, dim=-1)


# Tiny CPU twin of data/problems/suite/level2/8_BMM_Scale_Softmax.py: same Model, shapes small enough for Triton's interpreter.
batch_heads = 2
seq_len = 16
head_dim = 16


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim]
