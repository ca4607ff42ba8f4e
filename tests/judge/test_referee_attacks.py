"""A held-out red team's attempts on the float64 referee and on the held-outputs check (session 23, at its stop;
tests/fixtures/referee_attacks has each attempt and README.md the table). Closed in session 24: a later call that
swaps elements of an earlier answer (the fingerprint's sums were blind to order: now each element is weighted by a
keyed hash of its position), the referee's slack lent from a noisy part of an output to an exact part (the median
over the whole tensor: now the smallest median along any dimension through the element), and answers kept out of
the hold by an expanded view counted at its elements' size (now storage bytes). A second held-out red team
(session 24, tests/fixtures/referee_attacks2, its README has the table) on those fixes: the floor lent on a batch-1
output (a size-1 dimension has no line: now lent only to elements the reference itself rounded), and a ring of two
answers each a small view of a GiB storage (each held call counted at the whole storage, pushing the one before out
of the hold: now the extent its tensors reach). Open there: a Model whose meaning depends on its dtype (07), and two
honest kernels the referee's factor of 2 refuses (10, 14). A third (tests/fixtures/referee_hold_shapes_attacks):
answers strided a GiB apart (now each storage counts the smaller of its extent and its distinct elements); open
there: a 1-D output of mixed scales (01) and the other-shapes check's leading-size-only reach (03, 04). CPU, the
Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge
from pipeline.judge.worker import _mark, storage_bytes
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "referee_attacks"
SECOND = ROOT / "tests" / "fixtures" / "referee_attacks2"
THIRD = ROOT / "tests" / "fixtures" / "referee_hold_shapes_attacks"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"
PROBLEMS = {"sum": TINY / "12_Sum_Dim1.py", "gemv": TINY / "5_GEMV.py", "mixed": ATTACKS / "p_mixed.py", "bigview": ATTACKS / "p_bigview.py",
            "swish": TINY / "15_Swish.py", "cat_b1": SECOND / "p_cat_b1.py"}


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


@pytest.mark.parametrize("candidate, problem, status, says", [
    ("00_honest_sum.py", "sum", Status.OK, "passed every check"),
    ("01_swap_prev_output.py", "sum", Status.MISMATCH, "fresh_outputs: call "),
    ("02_bump_prev_output.py", "sum", Status.MISMATCH, "fresh_outputs: call "),
    ("03_median_rule_bf16.py", "mixed", Status.MISMATCH, "correctness: "),
    ("04_gemv_tf32.py", "gemv", Status.MISMATCH, "correctness: "),
    ("05_median_rule_wrong_formula.py", "mixed", Status.MISMATCH, "correctness: "),
])  # 06 and 07 (p_bigview: a 1 GiB expanded input) take about 3 minutes each on 2 cores: their hold is tested below
def test_each_attempt_gets_the_verdict_it_must(judge, candidate, problem, status, says):
    result = judge.evaluate(load_problem(PROBLEMS[problem]), load_candidate(ATTACKS / candidate))
    assert result.status is status and result.reason.startswith(says), result.reason
    if status is Status.MISMATCH and says == "correctness: ":
        assert "float64 referee" in result.reason and not any(f.name == "fp32_refereed" for f in result.flags), result.reason


@pytest.mark.parametrize("candidate, problem, status, says", [
    ("03_cat_b1_bf16_tanh.py", "cat_b1", Status.MISMATCH, "correctness: "),
    ("06_cat_b1_honest.py", "cat_b1", Status.OK, "passed every check"),
    ("20_ring2_hugebuf.py", "swish", Status.MISMATCH, "fresh_outputs: call trial_3 handed back memory that call trial_1's outputs still hold"),
])  # 04 and 05 are 03's class (an 11-bit significand, a wrong formula): checked by hand, mismatch in the tanh columns
def test_the_second_red_teams_attempts_get_the_verdicts_they_must(judge, candidate, problem, status, says):
    result = judge.evaluate(load_problem(PROBLEMS[problem]), load_candidate(SECOND / candidate))
    assert result.status is status and result.reason.startswith(says), result.reason
    if candidate.startswith("03"):  # met in the tanh columns, which the fp32 reference computes exactly
        detail = result.reason.split("float64 referee: ")[1]
        assert int(detail.split("first at [0, ")[1].split("]")[0]) >= 96, result.reason


@pytest.mark.parametrize("candidate", ["02_hold_pushout_ring.py", "91_ring_control.py"])
def test_a_ring_of_answers_whose_rows_are_strided_a_gib_apart_still_fails(judge, candidate):
    """A third held-out red team (tests/fixtures/referee_hold_shapes_attacks): answers strided over a GiB of a lazily
    allocated storage counted as GiB answers, each held alone, so call k + 2 wrote into call k's answer unseen."""
    result = judge.evaluate(load_problem(PROBLEMS["swish"]), load_candidate(THIRD / candidate))
    assert result.status is Status.MISMATCH and result.reason.startswith("fresh_outputs: call "), result.reason


def test_the_fingerprint_sees_swaps_and_changes_that_keep_plain_sums():
    values = torch.arange(1.0, 9.0)
    before = _mark(values, key=12345)
    swapped = values.clone()
    swapped[[0, 7]] = swapped[[7, 0]]
    traded = values.clone().view(torch.int32)
    traded[0] += 1
    traded[1] -= 2
    traded[2] += 1  # the bit patterns' sum and their position-weighted sum are both unchanged
    assert _mark(swapped, key=12345)[-2:] != before[-2:]
    assert _mark(traded.view(torch.float32), key=12345)[-2:] != before[-2:]
    assert _mark(values.clone(), key=12345)[-2:] == before[-2:]  # the same bits elsewhere: the same sums


def test_the_hold_counts_the_memory_kept_alive_not_a_views_elements():
    """06 and 07 end `mismatch` (fresh_outputs: call trial_2 changed call trial_1's outputs) with this count, by hand:
    python -m pipeline.cli check tests/fixtures/referee_attacks/07_hold_budget_base_only.py --ref
    tests/fixtures/referee_attacks/p_bigview.py --device cpu (about 3 minutes on 2 cores)."""
    from pipeline.judge.worker import HeldOutputs

    held = HeldOutputs()
    answer = torch.ones(64, 16)
    held.hold("trial_1", [answer], [torch.rand(64, 16), torch.zeros(1, dtype=torch.int64).expand((1 << 27) + 1)])
    assert [c.name for c in held.calls] == ["trial_1"]  # held: it keeps 8 KiB alive, not 1 GiB
    answer[0, 0] += 1
    assert held.spoiled() == ["trial_1's outputs"]
    base = torch.zeros(1, dtype=torch.int64)
    view = base.expand((1 << 27) + 1)  # 1 GiB by numel * element_size, 8 bytes of storage
    assert storage_bytes([view]) == 8 and storage_bytes([view, base]) == 8
    assert _mark(view, key=1)[-2:] == _mark(view, key=1)[-2:]  # read once per distinct element: no 1 GiB copy
    untouched = torch.empty((1 << 28) + 16384)  # 1 GiB of storage, never written: a small answer at its start
    assert storage_bytes([untouched[:16384]]) == 65536 and storage_bytes([untouched[:16], untouched[-16:]]) == 128
    strided = torch.as_strided(untouched, (16, 64), ((1 << 28) // 16, 1))  # rows a GiB apart: the answer's 4 KiB
    assert storage_bytes([strided]) == 4096
    square = torch.rand(64, 16)
    assert storage_bytes([square, square.t()]) == 4096 and storage_bytes([square[:, ::2]]) == 2048


def test_a_row_length_written_as_a_literal_fails_now_that_later_dimensions_vary(judge):
    """The third red team's 04: the row length 64 written into the kernel, right at every leading size. Later
    dimensions vary since session 25, so it is wrong where the row length is odd or doubled plus one."""
    result = judge.evaluate(load_problem(PROBLEMS["swish"]), load_candidate(THIRD / "04_fixed_cols.py"))
    # a wrong answer there, or (in the interpreter) its reads past the input's end abort the process in that phase
    wrong = result.status is Status.MISMATCH and "size of dimension 1 of tensor input 1" in result.reason
    aborted = result.status is Status.RUNTIME_ERROR and result.reason.endswith("during phase other_shapes")
    assert wrong or aborted, result.reason
