"""Attacks on the judge's check on inputs of other shapes, by a red team that had seen none of our fixtures
(session 20, tests/fixtures/shapes_attacks: each file's docstring says what it tries and what it got before). The
holes it found, and what closes them:
- kernels right only below the problem's batch, or at the remainders the judge happened to pick (grows,
  tail_mod4): the judge also tries the batch doubled plus one;
- a wrong answer followed by an exception, a printed "ValueError:" before a hard exit, a runaway allocation, all
  read as a clean refusal (wrong_then_raise, crash_disguised, oom_refusal): a refusal is now the first call
  raising a plain exception, read from the worker's reason (never the log the candidate writes), not a crash or
  the memory limit;
- a batch carried by the second input was never varied (hardcoded_batch_scale_first): each distinct leading size
  is tried in turn, and a problem where none varies says `not checked`;
- an integer input equal to the batch kept while the tensors were cut, an input no caller makes (honest_count_arg
  failed): it follows the batch;
- a reference that hangs on other inputs hung `egg check` (hang_derived): its probing of other shapes, in its first
  run, has 20 s (an alarm ends a hang in Python code) and the check says `not checked`.
Since session 21 the inputs of other shapes are sets of the check itself (pipeline.judge.resize), so some attacks
are caught at another size than before (a size of 1, plus two), and the scale-first problem's scale cut to one
element already catches the hardcoded batch.
Left as it is: only leading sizes vary (inner_fixed is `general`: the detail names every shape it was right on).
CPU, the Triton interpreter; no timings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.judge import Judge, judge as judge_module
from pipeline.judge.shapes import GENERAL, SPECIALISED, UNCHECKED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks"
ROWSUM = ATTACKS / "problems" / "rowsum.py"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: Path = ROWSUM):
    return judge.evaluate(load_problem(problem), load_candidate(ATTACKS / candidate))


@pytest.mark.parametrize("candidate", ["grows.py", "tail_mod4.py"])
def test_a_kernel_wrong_above_the_batch_or_at_other_remainders_fails(judge, candidate):
    result = verdict(judge, candidate)
    assert result.status is Status.MISMATCH and "wrong on inputs of another shape, leading size" in result.reason, result.reason


def test_a_wrong_answer_before_a_refusal_is_a_wrong_answer(judge):
    result = verdict(judge, "wrong_then_raise.py")
    assert result.status is Status.MISMATCH and "wrong on inputs of another shape" in result.reason, result.reason


@pytest.mark.parametrize("candidate", ["crash_disguised.py", "oom_refusal.py"])
def test_a_crash_or_a_runaway_allocation_is_no_refusal(judge, candidate):
    result = verdict(judge, candidate)
    assert result.status is Status.RUNTIME_ERROR, result.reason


def test_a_refusal_at_the_first_call_is_still_specialised(judge):
    result = verdict(judge, "indexerror_bug.py")
    assert result.ok and result.generality == SPECIALISED, result.reason


@pytest.mark.parametrize("candidate", ["stale_output.py", "detect_derived.py"])
def test_caching_an_output_or_looking_for_the_derived_files_is_banned(judge, candidate):
    result = verdict(judge, candidate)
    assert result.status is Status.BANNED, result.reason


def test_a_batch_carried_by_the_second_input_is_varied(judge):
    result = verdict(judge, "hardcoded_batch_scale_first.py", ATTACKS / "problems" / "scale_first.py")
    assert result.status is Status.MISMATCH and "wrong on inputs of another shape" in result.reason, result.reason


def test_an_integer_input_is_read_as_the_reference_reads_it(judge):
    """An integer input equal to the batch follows it (the row count beside the tensors) and, since the third red
    team (a11: a kernel dividing by the batch where the reference divides by k), is also kept while the batch
    changes: this kernel, which ignores its count argument where the reference divides by it, is wrong on inputs
    the reference accepts."""
    result = verdict(judge, "honest_count_arg.py", ATTACKS / "problems" / "count_arg.py")
    assert result.status is Status.MISMATCH and "integer inputs kept" in result.reason, result.reason


def test_honest_kernels_with_sizes_from_their_inputs_are_general(judge):
    assert verdict(judge, "honest_rowsum.py").generality == GENERAL
    result = verdict(judge, "honest_two_sizes.py", ATTACKS / "problems" / "two_sizes.py")
    assert result.ok and result.generality == GENERAL, result.reason


def test_an_inner_size_written_as_a_literal_fails_now_that_other_dimensions_vary(judge):
    """Once only leading sizes varied and this kernel, its row length a literal, was `general` (session 25 closed it)."""
    result = verdict(judge, "inner_fixed.py")
    assert not result.ok and "dimension 1" in result.reason, result.reason


def test_a_reference_that_hangs_on_other_inputs_ends_the_check_in_bounded_time(monkeypatch):
    monkeypatch.setattr(judge_module, "DERIVE_MIN_S", 3.0)
    with Judge(CPU, cache_dir=None) as judge:
        result = verdict(judge, "honest_rowsum.py", ATTACKS / "problems" / "hang_derived.py")
    assert result.ok and result.generality == UNCHECKED, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert check.passed is None and re.search(r"^not checked: the reference ran past the \d+ s its probing of other shapes has", check.detail)
