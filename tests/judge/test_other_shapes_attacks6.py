"""A sixth red team (session 22, a helper that had not seen our fixtures, on the fixes of the fifth;
tests/fixtures/shapes_attacks6 has each attempt and README.md the table). Fixed here: an honest kernel that returns
its input, as its reference does, failed `fresh_outputs` (the repeats call it on the same tensor): an output that
is the call's own input is the caller's memory; a kernel that answers a shape and then refuses it with fresh values
at the end (a12) fails; the sets asked again draw their values afresh (with two sets of other shapes, some kinds
of values never met another shape: a05's class). Caught already: one reused buffer per shape (a13), refusing unseen
values (a07), refusing then answering at the end (a11). Fixed in session 23: answers or inputs spoiled by a later
call (a ring of two buffers a01, a02, a03, a08, a09): the earlier calls' outputs and inputs are held (up to 1 GiB in
all) and each later call is checked against where they live and the fingerprint of their bits. Still open, listed
in the README: the problem's shape spoiled after another shape only for outlier values (a06). Fixed in session 24: a
kernel spoiled once a size is seen twice (a04: a third set asked again at a size seen before), reuse after an answer
over 1 GiB (a10: the last call is held alone where it fits; tested on HeldOutputs with a smaller budget, the fixture
itself takes minutes). CPU, the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL, SPECIALISED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks6"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
CPU = EvalOptions(device="cpu")  # the judge's own counts: a12 and a11 count calls at the problem's size


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: str = ""):
    path = ATTACKS / "problems" / problem if problem else SOFTMAX
    return judge.evaluate(load_problem(path), load_candidate(ATTACKS / candidate))


@pytest.mark.parametrize("candidate, problem, generality", [
    ("h01_guard_refuses.py", "", SPECIALISED),
    ("h02_scratch_buffer.py", "", GENERAL),
    ("h03_output_is_input.py", "softmax_passthrough.py", GENERAL),
    ("h05_two_views_one_fresh_buffer.py", "softmax_and_max.py", GENERAL),
])
def test_honest_kernels_pass_as_what_they_are(judge, candidate, problem, generality):
    result = verdict(judge, candidate, problem)
    assert result.ok and result.generality == generality, result.reason


@pytest.mark.parametrize("candidate, says", [
    ("a12_answer_then_refuse_at_end.py", "other_shapes: answered inputs of another shape, then refused the same shape"),
    ("a13_ring1_control.py", "fresh_outputs: call "),
    ("a11_refuse_then_answer_at_end.py", "other_shapes: refused inputs of another shape, then answered them"),
    ("a04_spoil_after_repeat_size.py", "other_shapes: wrong on inputs of another shape"),
])
def test_inconsistent_answers_and_reused_buffers_fail(judge, candidate, says):
    result = verdict(judge, candidate)
    assert result.status is Status.MISMATCH and result.reason.startswith(says), result.reason


def test_refusing_values_never_seen_before_is_caught(judge):
    result = verdict(judge, "a07_refuse_first_sight.py")
    assert not result.ok, result.reason


@pytest.mark.parametrize("candidate, status, says", [
    ("a01_ring2_outputs.py", Status.MISMATCH, "fresh_outputs: call trial_3 handed back memory that call trial_1's outputs still hold"),
    ("a02_scribble_prev_output.py", Status.MISMATCH, "fresh_outputs: call shape_"),
    ("a08_detach_held_output.py", Status.MISMATCH, "fresh_outputs: call "),
    ("a03_damage_prev_inputs.py", Status.BANNED, "input_mutation: call shape_"),
    ("a09_refusal_damages_on_retry.py", Status.BANNED, "input_mutation: call shape_"),
])
def test_a_later_call_that_spoils_what_an_earlier_one_handed_over_fails(judge, candidate, status, says):
    """A caller keeps `y1 = m(x1)` and x1 while it calls m again: a later call that reuses, rewrites, empties or moves
    an earlier answer, or writes to the earlier inputs (or to inputs it refused), changes what the caller holds."""
    result = verdict(judge, candidate)
    assert result.status is status and result.reason.startswith(says), result.reason


def test_an_answer_over_the_hold_budget_is_still_held_alone_where_it_fits(monkeypatch):
    """a10's class: an answer larger than the hold's budget was never held, so the next call could hand back its memory.
    Now the last call is held alone where there is room for it (twice its size free on a GPU, up to 4 GiB on the host)."""
    import torch

    from pipeline.judge import worker

    monkeypatch.setattr(worker, "KEEP_ON_DEVICE_BYTES", 1 << 12)
    held = worker.HeldOutputs()
    small = torch.zeros(8)
    held.hold("trial_1", [small], [])
    big = torch.zeros(2048)  # 8 KiB: over the budget
    held.hold("trial_2", [big], [])
    assert [c.name for c in held.calls] == ["trial_2"]
    assert held.shared_by([big[:100]], []) == "trial_2"  # a view into the big answer handed back: caught
    monkeypatch.setattr(worker, "_room_for", lambda nbytes, values, reserve=0: False)
    held.hold("trial_3", [torch.zeros(4096)], [])
    assert [c.name for c in held.calls] == ["trial_2"]  # no room: kept as it was
