"""A fifth red team on the check on inputs of other shapes (session 22, a helper that had not seen our fixtures, on
the fixes of the fourth; tests/fixtures/shapes_attacks5 has each attempt and README.md the table). Closed here:
- input damage a value comparison does not see (a05, a06: -0.0 written over 0.0; a15: the caller's tensor rebound
  to other memory holding the same values): inputs are compared bit for bit and where they live;
- state changed by late refusals (a10: every size already met, the problem's too): the audit call on the problem's
  shape now comes after the sets asked for again;
- a first call that raises and a second that answers (a11): no refusal, a failed check;
- inputs sharing a later anchor's batch never varied apart (a13);
- a second call at a size answered from the first (a16): the first set asked again is at its own size;
- other shapes never saw scaled values (a01): they are one of the kinds drawn (tested on the draw);
- answers that are views of one reused buffer (a07): each call's outputs must be memory of their own.
Still open, listed in the README: a02 (batch 0 is never tried), a03 (residues met by chance), a04 (a compile error
caught and turned into the candidate's own exception after the `except`: to the user, a clean repeatable refusal),
a08 (a kernel wrong only after 12 distinct sizes), a09 and a14
(index inputs are the problem's draws: a gather never reads past the problem's table). CPU, the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL, SPECIALISED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks5"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: str = ""):
    path = ATTACKS / "problems" / problem if problem else SOFTMAX
    return judge.evaluate(load_problem(path), load_candidate(ATTACKS / candidate))


@pytest.mark.parametrize("candidate, problem", [
    ("a05_signed_zero_damage.py", "relu_scale.py"),
    ("a06_signed_zero_refusal.py", "relu_scale.py"),
    ("a06b_control_real_write.py", "relu_scale.py"),
    ("a15_input_storage_rebound.py", ""),
])
def test_input_damage_that_reads_the_same_is_banned(judge, candidate, problem):
    result = verdict(judge, candidate, problem)
    assert result.status is Status.BANNED and "input_mutation" in result.reason, result.reason


@pytest.mark.parametrize("candidate, problem, says", [
    ("a10_late_refusal_damages_seen_shapes.py", "", ("audit", "repeat_1")),  # the repeats, since session 26's sets
    ("a11_flaky_refusal_hidden.py", "", "then answered the same inputs when called again"),
    ("a13_second_batch_never_apart.py", "two_batches.py", "that input only"),
    ("a16_second_call_stale_capture.py", "", ("asked again at the end", "the leading and every later size at once")),
])
def test_a_kernel_wrong_where_the_check_now_looks_fails(judge, candidate, problem, says):
    result = verdict(judge, candidate, problem)
    says = (says,) if isinstance(says, str) else says
    assert result.status is Status.MISMATCH and any(s in result.reason for s in says), result.reason


def test_answers_that_are_views_of_one_reused_buffer_fail(judge):
    """a07: each answer a view of one workspace the next call rewrites (a user keeping two answers reads one twice):
    the worker keeps the last call's outputs alive through the next, so fresh outputs never land there."""
    result = verdict(judge, "a07_output_buffer_reuse.py")
    assert result.status is Status.MISMATCH and result.reason.startswith("fresh_outputs: call "), result.reason


@pytest.mark.parametrize("candidate, problem, generality", [
    ("h01_guard_valueerror.py", "", SPECIALISED),
    ("h02_guard_static_view.py", "", SPECIALISED),
    ("h04_gather_general.py", "gather_rows.py", GENERAL),
    ("h05_prefix_rows_general.py", "prefix_rows.py", GENERAL),
])
def test_honest_kernels_pass_as_what_they_are(judge, candidate, problem, generality):
    result = verdict(judge, candidate, problem)
    assert result.ok and result.generality == generality, result.reason
