"""A fourth red team on the check on inputs of other shapes (session 21, 20 minutes, on the landed fixes of the
third; tests/fixtures/shapes_attacks4 has each attempt and README.md the table). Closed here, each a class:
- a refusal that holds only for a few calls (a1: refuses twice, answers the third) or that changes what the model
  answers at other shapes later (a2: refuses the last size tried, then is wrong at every other one): every set it
  refused is asked for once more at the very end (a refusal then is as it should be; an answer fails the check), and
  two sets drawn at random are asked for again there, drawn afresh, and compared;
- input damage that a float64 sum does not see (a3: two elements swapped; a4: integer indices permuted): a refused
  call's inputs are compared whole with the copy made before it;
- an interpreter error wrapped in the candidate's own exceptions (a6): the whole chain is read;
- a second input sharing the batch never varied alone (a7), an integer never varied alone (a8): both are now.
a5 (transforms assigned by position) is closed by drawing them per set for each check, each kind at least once;
which sets a check gives outlier values is chance, so it is tested on the draw (tests/judge/test_draw.py), not on
one verdict. CPU, the Triton interpreter."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL, UNCHECKED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks4"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: str = ""):
    path = ATTACKS / "problems" / problem if problem else SOFTMAX
    return judge.evaluate(load_problem(path), load_candidate(ATTACKS / candidate))


def test_a_refusal_that_lets_the_third_call_through_fails(judge):
    result = verdict(judge, "a1_third_call.py")
    assert result.status is Status.MISMATCH, result.reason
    assert "refused inputs of another shape, then answered them when asked again" in result.reason, result.reason


def test_a_refusal_that_spoils_the_answers_at_other_shapes_after_it_fails(judge):
    result = verdict(judge, "a2_refusal_poisons_later.py")
    # met at the end, or since session 26 already where the batch and the row change together
    assert result.status is Status.MISMATCH and any(s in result.reason for s in ("asked again at the end", "the leading and every later size at once")), result.reason


@pytest.mark.parametrize("candidate, problem", [("a3_checksum_swap.py", ""), ("a4_index_permute.py", "gather_rows.py")])
def test_a_refusal_that_damaged_its_inputs_keeping_their_sum_is_banned(judge, candidate, problem):
    result = verdict(judge, candidate, problem)
    assert result.status is Status.BANNED and "input_mutation" in result.reason, result.reason


def test_an_interpreter_error_wrapped_in_the_candidates_own_exceptions_is_no_refusal(judge):
    result = verdict(judge, "a6_disguised_interpreter_error.py")
    assert result.status is Status.RUNTIME_ERROR and "InterpreterError" not in result.generality, result.reason


@pytest.mark.parametrize("candidate, problem, varied", [
    ("a7_second_input_alone.py", "two_colsums.py", "of tensor input 2 halved, that input only"),
    ("a8_count_alone.py", "prefix_colsum.py", "integer inputs only"),
])
def test_an_input_never_varied_alone_is_varied_now(judge, candidate, problem, varied):
    """Failed where the input is varied alone; since the row length varies too (session 25), these kernels, whose
    row length is a constexpr `tl.arange` bound, may crash there first: failed either way."""
    result = verdict(judge, candidate, problem)
    wrong = result.status is Status.MISMATCH and "wrong on inputs of another shape" in result.reason and varied in result.reason
    crashed = result.status is Status.RUNTIME_ERROR and re.search(r"call shape_dim1_\w+ raised InterpreterError", result.reason)
    assert wrong or crashed, result.reason


@pytest.mark.parametrize("candidate, problem", [("h1_honest_softmax.py", "")])
def test_honest_kernels_still_pass(judge, candidate, problem):
    result = verdict(judge, candidate, problem)
    assert result.status is Status.OK and result.generality in (GENERAL, UNCHECKED), result.reason


def test_a_gather_right_only_at_power_of_two_row_lengths_fails_where_it_crashes(judge):
    """h2 reads its row length D as the bound of a constexpr `tl.arange`: right at the problem's 64 and any power of
    two, a compile error at 63 or 129, which the reference takes. Since other dimensions vary (session 25) that is
    a failed check, as a crash at another leading size is: a drop-in is right there or refuses in one clear line."""
    result = verdict(judge, "h2_honest_gather.py", "gather_rows.py")
    assert result.status is Status.RUNTIME_ERROR and re.search(r"call shape_dim1_\w+ raised InterpreterError", result.reason), result.reason
