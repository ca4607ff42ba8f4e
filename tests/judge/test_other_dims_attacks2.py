"""Red team 13 (session 26, a helper that had not seen our fixtures, on 7e914db; tests/fixtures/dims_attacks2 has
each attempt and README.md the table: 22 of 23 wrong kernels got ok). Closed here: a kernel that assumes a packed
row (c06), NCHW offsets without `.contiguous()` (c19) or a storage offset of zero (c24) meets the two layout sets
(the problem's sizes in views with a stride of 2, and contiguous one element in); a square GEMM's N taken as its K
(c13) meets N cut alone; a kernel wrong only where the batch and the row both change (c04) meets the set that cuts
them together; a kernel wrong at batches below the problem's other than the planned ones (c02) meets a batch drawn
there (a sixth set asked again). The honest kernels (h1-h3) stay general. The rest are open or met only in some checks (the
README says which). CPU, the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "dims_attacks2"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", correctness_trials=2)) as judge:
        yield judge


@pytest.mark.parametrize("candidate, problem, says", [
    ("c06_softmax_noncontig.py", TINY / "23_Softmax.py", "views that are not contiguous"),
    ("c19_sum4d_channels_last.py", ATTACKS / "p_sum_c_4d.py", "views that are not contiguous"),
    ("c24_softmax_storage_offset.py", TINY / "23_Softmax.py", "contiguous views one element into their memory"),
    ("c13_gemm_rect_n.py", TINY / "1_GEMM_Square.py", "size of dimension 1 of tensor input 2 odd, that dimension only"),
    ("c04_softmax_both_change.py", TINY / "23_Softmax.py", "the leading and every later size at once (16 to 15, 64 to 63)"),
    ("c02_softmax_batch_below_gap.py", TINY / "23_Softmax.py", "(drawn at random"),  # 2 to 14 but the planned 8
])
def test_a_kernel_wrong_on_a_view_or_a_size_apart_fails(judge, candidate, problem, says):
    result = judge.evaluate(load_problem(problem), load_candidate(ATTACKS / candidate))
    assert result.status is Status.MISMATCH and "wrong on inputs of another shape" in result.reason, result.reason
    assert says in result.reason, result.reason


@pytest.mark.parametrize("candidate, problem", [
    ("h1_softmax_online_blocks.py", TINY / "23_Softmax.py"),
    ("h2_sum_dim_strided.py", TINY / "12_Sum_Dim1.py"),
    ("h3_gelu_broadcast_flat.py", TINY / "16_GELU_Scale_Bias.py"),
])
def test_honest_kernels_that_honour_strides_stay_general(judge, candidate, problem):
    result = judge.evaluate(load_problem(problem), load_candidate(ATTACKS / candidate))
    assert result.status is Status.OK and result.generality == GENERAL, result.reason
