# Seed 1 for 23_Softmax: one program per row, three passes over the row in small blocks (max, sum of exp, write).
# Naive but honest: the row is read three times and only 256 columns are in flight per program.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_looped_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    out_row = out_ptr + row * n_cols
    row_max = -float("inf")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    denominator = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        denominator += tl.sum(tl.exp(x - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_row + cols, tl.exp(x - row_max) / denominator, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2d)
        n_rows, n_cols = x2d.shape
        softmax_looped_kernel[(n_rows,)](x2d, out, n_cols, BLOCK=256)
        return out.view(x.shape)
