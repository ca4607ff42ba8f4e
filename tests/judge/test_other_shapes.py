"""Inputs the judge was not shown: every check also calls the candidate on inputs of other shapes derived from
the problem's (each leading size set to 1, halved, odd, plus two, doubled, doubled plus one, quadrupled plus
three), where the reference runs on them, in the same worker after the problem's own trials. Right there:
`general`; a clean refusal: `specialised to the problem's shapes`, with its error; a wrong answer: a failed
verdict that says which shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge
from pipeline.judge import resize
from pipeline.judge.shapes import GENERAL, SPECIALISED
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
    for size, shape in (("halved", "[8, 64]"), ("odd", "[15, 64]"), ("1", "[1, 64]"), ("plus two", "[18, 64]"),
                        ("doubled", "[32, 64]"), ("doubled plus one", "[33, 64]"), ("quadrupled plus three", "[67, 64]")):
        assert re.search(rf"leading size {size}(, (outlier|signed|scaled) values)? \({re.escape(shape)}\)", check.detail), check.detail
    # each check draws which sets take outlier, signed or scaled values, each kind at least once; six are asked
    # again, two at their own sizes, two batches and two row lengths (above and below) at sizes drawn for the check
    assert all(f"{kind} values" in check.detail for kind in ("outlier", "signed", "scaled")), check.detail
    assert check.detail.count("asked again at the end") == 6 and check.detail.count("drawn at random") == 4, check.detail
    assert re.search(r"size of dimension 1 of tensor input 1 \d+ \(drawn at random", check.detail), check.detail
    assert check.passed


def test_literal_sizes_that_pass_the_problems_shapes_fail_on_another_batch(judge):
    result = judge.evaluate(load_problem(SOFTMAX), load_candidate(FIXTURES / "softmax_literal_rows.py"))
    assert result.status is Status.MISMATCH and result.generality == ""
    assert re.match(r"other_shapes: wrong on inputs of another shape, leading size halved(, \w+ values)? \(\[8, 64\]\)", result.reason), result.reason
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


def test_the_derived_inputs_keep_the_draws_and_cut_or_grow_them():
    x = torch.rand(16, 64)
    plans = resize.plans([x], output_bytes=x.numel() * 4)
    sizes = {p["size"]: p["new"] for p in plans if not p.get("dim") and not p.get("layout")}
    assert sizes == {"one": 1, "halved": 8, "odd": 15, "plus_two": 18, "doubled": 32, "doubled_plus_one": 33, "large": 67}
    assert {p["size"]: p["new"] for p in plans if p.get("dim") == 1} == {"odd": 63, "doubled_plus_one": 129}  # the row length
    more = iter([[torch.rand(16, 64)] for _ in range(16)])
    for plan in (p for p in plans if p["shared"] and not p.get("together")):
        derived = resize.resize([x], plan, lambda: next(more))
        if plan.get("dim"):
            assert [tuple(t.shape) for t in derived] == [(16, plan["new"])]
            assert torch.equal(derived[0][:, : min(plan["new"], 64)], x[:, : min(plan["new"], 64)])
        else:
            assert [tuple(t.shape) for t in derived] == [(plan["new"], 64)]
            assert torch.equal(derived[0][: min(plan["new"], 16)], x[: min(plan["new"], 16)])  # the same draws, cut or grown


def test_a_size_shared_by_two_operands_changes_in_both_and_the_anchor_keeps_its_rows():
    """A reduction length shared by two operands (a GEMM's K: A's columns, B's rows) changes in both, so the
    reference runs; a square table keeps its row count (an index input's values point into it)."""
    a, b = torch.rand(8, 24), torch.rand(24, 12)
    plan = next(p for p in resize.plans([a, b], 8 * 12 * 4) if p.get("dim") == 1 and p["anchor"] == 0 and p["shared"] and p["size"] == "odd")
    derived = resize.resize([a, b], plan, lambda: [torch.rand(8, 24), torch.rand(24, 12)])
    assert [tuple(t.shape) for t in derived] == [(8, 23), (23, 12)]
    square = torch.rand(16, 16)
    plan = next(p for p in resize.plans([square], 16 * 16 * 4) if p.get("dim") == 1 and p["shared"] and p["size"] == "doubled_plus_one")
    assert tuple(resize.resize([square], plan, lambda: [torch.rand(16, 16)])[0].shape) == (16, 33)


def test_anchors_count_only_tensors_with_a_leading_dimension():
    """A 0-dim first input is no anchor, and the anchor's index means the same in every process (a red team's
    0-dim scale moved the varied size to the bias)."""
    inputs = [torch.tensor(2.0), torch.rand(16, 64), torch.rand(64)]
    assert resize.anchors(inputs) == [0, 1]
    derived = resize.resize(inputs, {"anchor": 0, "shared": True, "new": 8}, lambda: inputs)
    assert [tuple(t.shape) for t in derived] == [(), (8, 64), (64,)]


def test_growth_stops_where_the_inputs_would_get_large():
    """Above the problem's size while the whole stays under 1 GiB, or 2.2x the problem's own, and never past 8 GiB."""
    def sizes(rows: int) -> set[str]:
        return {p["size"] for p in resize.plans([torch.empty(rows, 1024, device="meta")], output_bytes=0) if not p.get("layout")}

    below = {"one", "halved", "odd"}
    assert sizes(1 << 14) == below | {"plus_two", "doubled", "doubled_plus_one", "large"}  # 64 MiB: 4n+3 under 1 GiB
    assert sizes(1 << 18) == below | {"plus_two", "doubled", "doubled_plus_one"}  # 1 GiB: 2.2x allows doubling
    assert sizes(1 << 20) == below | {"plus_two", "doubled"}  # 4 GiB: 8 GiB at most
    assert sizes(1 << 22) == below  # 16 GiB


@pytest.mark.parametrize("example", ["elementwise_triton", "gemm_epilogue_triton", "layernorm_triton", "matmul_triton", "softmax_triton"])
def test_every_example_candidate_is_general(judge, example):
    """The examples take their sizes from their inputs: right on every derived shape the reference runs on."""
    path = ROOT / "examples" / "candidates" / f"{example}.py"
    problem = ROOT / path.read_text().split("Candidate for ", 1)[1].split(" ", 1)[0]
    result = judge.evaluate(load_problem(problem), load_candidate(path))
    assert result.status is Status.OK and result.generality == GENERAL, f"{result.status.value}: {result.reason}"


def test_a_set_the_reference_refuses_with_a_fresh_draw_is_not_owed_and_the_rest_are_checked(judge):
    """Which shapes the reference takes is found with one draw; a fresh draw it refuses (a red team's honest gather
    kernel met an index past a cut table in about 1 run of 4) is dropped from this check alone, and the verdict says
    which: the candidate is judged on every other set."""
    problem = load_problem(ROOT / "tests" / "fixtures" / "shapes" / "refuses_outliers_off_shape.py")
    result = judge.evaluate(problem, load_candidate(ROOT / "examples" / "candidates" / "softmax_triton.py"))
    assert result.status is Status.OK and result.generality == GENERAL, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    # the sets that take outlier values are drawn for each check (at least one does): the reference refuses those
    assert check.passed and "not owed, the reference refused this check's draw of: leading size" in check.detail, check.detail
    assert "outlier values" in check.detail.split("not owed", 1)[1] and resize.OTHER_SHAPE_FAILED in check.detail, check.detail
