"""Inputs the judge was not shown: after a candidate passes on the problem's own inputs, the judge judges it on
inputs of other shapes derived from them (the batch halved, then odd), where the reference runs on them. Right
there: `general`; a clean refusal: `specialised to the problem's shapes`, with its error; a wrong answer: a failed
verdict that says which shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge
from pipeline.judge.shapes import GENERAL, SPECIALISED, Derivation, derived_source
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
GEMM = ROOT / "data" / "problems" / "tiny" / "level1" / "1_GEMM_Square.py"
FIXTURES = ROOT / "tests" / "fixtures" / "shapes"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


def test_a_general_kernel_is_right_on_the_derived_shapes(judge):
    result = judge.evaluate(load_problem(SOFTMAX), load_candidate(ROOT / "examples" / "candidates" / "softmax_triton.py"))
    assert result.status is Status.OK and result.generality == GENERAL, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert check.passed and "leading size halved ([8, 64])" in check.detail and "leading size odd ([15, 64])" in check.detail
    assert "leading size doubled plus one ([33, 64])" in check.detail


def test_literal_sizes_that_pass_the_problems_shapes_fail_on_another_batch(judge):
    result = judge.evaluate(load_problem(SOFTMAX), load_candidate(FIXTURES / "softmax_literal_rows.py"))
    assert result.status is Status.MISMATCH and result.generality == ""
    assert result.reason.startswith("wrong on inputs of another shape, leading size halved ([8, 64])"), result.reason
    trial_checks = [c for c in result.checks if c.name != "other_shapes"]
    assert all(c.passed is not False for c in trial_checks)  # right on the problem's own inputs


def test_a_kernel_specialised_with_a_guard_is_called_specialised_with_its_error(judge):
    result = judge.evaluate(load_problem(SOFTMAX), load_candidate(FIXTURES / "softmax_guarded.py"))
    assert result.status is Status.OK and result.generality == SPECIALISED, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert "this softmax is specialised to contiguous inputs of shape (16, 64); got (8, 64)" in check.detail


def test_a_derivation_the_reference_does_not_run_on_is_not_owed(judge):
    """A square GEMM's A and B share their leading size: cutting both breaks the reference, so A alone is cut."""
    result = judge.evaluate(load_problem(GEMM), load_candidate(ROOT / "examples" / "candidates" / "matmul_triton.py"))
    assert result.status is Status.OK and result.generality == GENERAL, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert "that input only" in check.detail


def test_the_derived_problem_keeps_the_draws_and_cuts_them():
    for name, rows in (("halved", 8), ("odd", 15), ("doubled_plus_one", 33)):
        source = derived_source(SOFTMAX.read_text(), Derivation(name, True))
        assert source.startswith(SOFTMAX.read_text().rstrip("\n")) and "get_inputs = _egg_derived_inputs" in source
        namespace: dict = {}
        exec(compile(source, "derived.py", "exec"), namespace)  # a repository problem: trusted here
        torch.manual_seed(0)
        derived = namespace["get_inputs"]()
        torch.manual_seed(0)
        nominal = namespace["_egg_derived_inputs"].__defaults__[0]()
        assert [tuple(x.shape) for x in derived] == [(rows, 64)]
        assert torch.equal(derived[0][: min(rows, 16)], nominal[0][: min(rows, 16)])  # the same draws, cut or grown


@pytest.mark.parametrize("example", ["elementwise_triton", "gemm_epilogue_triton", "layernorm_triton", "matmul_triton", "softmax_triton"])
def test_every_example_candidate_is_general(judge, example):
    """The examples take their sizes from their inputs: right on every derived shape the reference runs on."""
    path = ROOT / "examples" / "candidates" / f"{example}.py"
    problem = ROOT / path.read_text().split("Candidate for ", 1)[1].split(" ", 1)[0]
    result = judge.evaluate(load_problem(problem), load_candidate(path))
    assert result.status is Status.OK and result.generality == GENERAL, f"{result.status.value}: {result.reason}"
