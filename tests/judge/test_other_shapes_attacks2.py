"""A second red team on the check on inputs of other shapes (session 20, after the first one's fixes; the fixtures
in tests/fixtures/shapes_attacks2 say what each tries and what it got then: 11 of 13 wrong judgements). What closes
them (session 21):
- sizes never tried (batch 1, far above the batch, a residue of 2 mod 4, a multiple of 8 a guard lets through):
  every check now calls the candidate at 1, halved, odd, plus two, doubled, doubled plus one and quadrupled plus
  three (growth while the inputs stay small);
- one shape per worker process: the inputs of other shapes are sets of the check itself, called in the same worker
  after the problem's own trials (and before the repeats on the problem's inputs);
- a refusal read from the first call alone: a refused call is called again with the same inputs, and must refuse
  again; what it returns then is compared;
- the batch carried by a later input, or behind a 0-dim first input: each distinct leading size is an anchor, all
  of them tried, counted over the tensors with a leading dimension in every process;
- honest refusals failed: any plain exception of the candidate's is a refusal (its own subclass, a message that
  says "out of memory"); torch's own allocator's RuntimeError is not.
Left: a batch in dimension 1 (`seq_first_fixed_batch`) is still never varied (only leading sizes are).
CPU, the Triton interpreter; no timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL, SPECIALISED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks2"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: Path = SOFTMAX):
    return judge.evaluate(load_problem(problem), load_candidate(ATTACKS / candidate))


@pytest.mark.parametrize("candidate, problem", [
    ("large_batch_wrong.py", SOFTMAX),
    ("mod4_tail_bug.py", SOFTMAX),
    ("refuse_not_mult8.py", SOFTMAX),
    ("stateful_first_shape.py", SOFTMAX),
    ("first_call_only_guard.py", SOFTMAX),
    ("weight_first_fixed_batch.py", ATTACKS / "problems" / "weight_first_linear.py"),
    ("zero_dim_first_fixed_batch.py", ATTACKS / "problems" / "zero_dim_first.py"),
    ("batch_two_pairs.py", ATTACKS / "problems" / "batch_one.py"),
])
def test_a_kernel_wrong_on_some_other_shape_fails(judge, candidate, problem):
    result = verdict(judge, candidate, problem)
    # or banned for torch doing the job at another shape: since session 28 a call there is held to the reference's own
    # work at that set, measured, and zero_dim_first_fixed_batch's torch mean is past that share on some draws
    banned = result.status is Status.BANNED and result.reason.startswith("torch_delegation:") and " call shape_" in result.reason
    assert banned or (result.status is Status.MISMATCH and "wrong on inputs of another shape" in result.reason), result.reason


def test_a_batch_of_one_that_launches_nothing_fails(judge):
    result = verdict(judge, "batch_one_wrong.py")  # zeros from torch at batch 1: no kernel of its own ran there
    assert result.status is Status.BANNED and "no Triton kernel of the candidate launched in call(s) shape_one_0" in result.reason


def test_out_of_bounds_on_a_smaller_batch_fails(judge):
    result = verdict(judge, "oob_small_batch.py")
    assert not result.ok and result.generality == "", result.reason


@pytest.mark.parametrize("candidate", ["custom_exception_refusal.py", "oom_word_refusal.py"])
def test_an_honest_refusal_is_specialised(judge, candidate):
    result = verdict(judge, candidate)
    assert result.ok and result.generality == SPECIALISED, result.reason


def test_a_batch_in_dimension_1_is_varied_now(judge):
    """The hole this red team left open, closed in session 25: other dimensions vary too, so this kernel that fixes
    the batch of (seq, batch, hidden) inputs fails where the batch dimension changes (its reads run past the input)."""
    result = verdict(judge, "seq_first_fixed_batch.py", ATTACKS / "problems" / "seq_first_softmax.py")
    # its reads past the input: garbage (a mismatch) or, in the interpreter, the process aborted there or later
    assert result.status in (Status.MISMATCH, Status.RUNTIME_ERROR), result.reason
