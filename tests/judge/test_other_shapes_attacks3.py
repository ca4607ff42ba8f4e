"""A third red team on the check on inputs of other shapes (session 21, on the check as sets of the check itself;
tests/fixtures/shapes_attacks3 has each attempt, the verdict it should get and the one it got, and README.md the
table). Closed here, each a class:
- a refusal that wrote to its inputs (a06, a13: it halved x, restored on the judge's identical retry): a refused
  call's inputs are checked, and the retry gets a fresh copy; one that changed the model's state (a16) meets the
  repeats on the problem's own inputs, which come after;
- a guard of the candidate's own whose message mentions memory (h03) is a refusal; Triton's interpreter failing on
  another size (h04) is not (on a GPU the same kernel fails to compile);
- the growth estimate counted inputs that do not grow (a09), inputs of two batch sizes were never tried (a10), an
  integer equal to the batch always followed it (a11), a fourth leading size was never varied (a18);
- other shapes saw only the problem's draws (a17): every other set takes the outlier or signed values.
Closed in session 22: a04 (right only on the sizes tried) and a05 (refusing exactly those): two sets are asked for
again at sizes drawn for the check. Open, and listed in the fixtures' README: a01 (a grid capped above the largest
size tried), a02 (residues 5 and 6 mod 8: met only where a drawn size has them), each shape is called at most twice
and the problem's shape first (a03, a14), the judge calls in training mode under no_grad (a07, a12),
inputs are contiguous (a08), tensors inside lists are not varied (a15). CPU, the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge, resize
from pipeline.judge.shapes import GENERAL, SPECIALISED
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "fixtures" / "shapes_attacks3"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def verdict(judge, candidate: str, problem: str = ""):
    path = ATTACKS / "problems" / problem if problem else SOFTMAX
    return judge.evaluate(load_problem(path), load_candidate(ATTACKS / candidate))


@pytest.mark.parametrize("candidate", ["a06_refusal_mutates.py", "a13_refusal_mutates_restores.py"])
def test_a_refusal_that_wrote_to_its_inputs_is_banned(judge, candidate):
    result = verdict(judge, candidate)
    assert result.status is Status.BANNED and "input_mutation" in result.reason, result.reason


@pytest.mark.parametrize("candidate, problem", [
    ("a16_refusal_poisons_state.py", ""),
    ("a17_unstable_generic.py", ""),
    ("a10_shared_only.py", "p02_two_batches.py"),
    ("a11_int_follows.py", "p03_int_coincides.py"),
    ("a18_fourth_anchor.py", "p05_four_batches.py"),
])
def test_a_kernel_wrong_somewhere_the_check_now_looks_fails(judge, candidate, problem):
    result = verdict(judge, candidate, problem)
    assert result.status is Status.MISMATCH, result.reason


@pytest.mark.parametrize("candidate", ["a04_size_set.py", "a05_refuse_exactly.py"])
def test_a_kernel_right_only_on_the_sizes_the_judge_tries_fails(judge, candidate):
    """Since session 22 two sets are asked for again at the end at sizes drawn for the check that no other set has:
    a kernel that knows which sizes the judge tries (right there, or refusing exactly those) meets another."""
    result = verdict(judge, candidate)
    assert result.status is Status.MISMATCH and "drawn at random" in result.reason, result.reason


@pytest.mark.parametrize("candidate, problem, generality", [
    ("h01_guard_specialised.py", "", SPECIALISED),
    ("h03_guard_says_memory.py", "", SPECIALISED),
    ("h02_persistent_loop.py", "", GENERAL),
    ("h05_int_honest.py", "p03_int_coincides.py", GENERAL),
])
def test_honest_kernels_pass_as_what_they_are(judge, candidate, problem, generality):
    result = verdict(judge, candidate, problem)
    assert result.ok and result.generality == generality, result.reason


def test_an_input_that_does_not_grow_leaves_room_for_larger_sizes():
    """a09 on p01 (a 560 MiB table beside x of 16 rows; judged whole it takes minutes on the CPU): only the inputs
    that grow count towards the growth limit, so x's batch is tried above 2n."""
    x, table = torch.empty(16, 64, device="meta"), torch.empty(560 << 20, dtype=torch.uint8, device="meta")
    sizes = {p["size"] for p in resize.plans([x, table], output_bytes=16 * 64 * 4) if p["anchor"] == 0}
    assert {"doubled_plus_one", "large"} <= sizes


def test_an_interpreter_error_on_another_size_is_no_refusal(judge):
    result = verdict(judge, "h04_constexpr_batch.py")
    assert not result.ok and result.generality == "", result.reason
