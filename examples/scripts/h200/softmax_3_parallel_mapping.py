# 23_Softmax, parallel mapping: a persistent grid of a few programs per SM, each striding over the rows, instead of
# one short-lived program per row (65536 launches' worth of block scheduling).
import torch
import torch.nn as nn
import triton
import triton.language as tl

PROGRAMS_PER_SM = 4


@triton.jit
def softmax_persistent_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        numerator = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


def program_count(x: torch.Tensor, n_rows: int) -> int:
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    return min(n_rows, sms * PROGRAMS_PER_SM)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2d)
        n_rows, n_cols = x2d.shape
        grid = (program_count(x2d, n_rows),)
        softmax_persistent_kernel[grid](x2d, out, n_rows, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out.view(x.shape)
