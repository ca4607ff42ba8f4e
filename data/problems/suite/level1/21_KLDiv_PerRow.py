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


# Estimate: both inputs are 16384 x 8192 fp32 = 512 MiB; log_softmax and softmax (~3 passes each), kl_div
# (~2 kernels, ~5 passes) and the sum (1): ~12 passes of 512 MiB = 6 GiB at 4.3 TB/s = ~1.5 ms.
# Measured: 2.19 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 16384
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
