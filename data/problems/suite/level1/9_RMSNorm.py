import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension written in plain torch ops: x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rstd * self.weight


# Estimate: x is 32768 x 8192 fp32 = 1 GiB; eager makes 4 kernels over it (pow r+w, mean r, *rstd r+w,
# *weight r+w) = ~7 GiB at 4.3 TB/s = ~1.7 ms.
# Measured: 2.36 ms eager on an H200 (torch 2.11+cu130, CUDA events, L2 flushed, 2026-11-29).
batch_size = 32768
dim = 8192


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim, 1e-6]
