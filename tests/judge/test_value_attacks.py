"""Held-out red teams 17 and 18 (session 27; tests/fixtures/value_attacks, README.md the table): an argmax that returns
the last of tied maxima (torch returns the first) passed every check, since continuous draws never tie. A ties trial is
asked where the reference returns integers: the problem's draws on a grid drawn per set (step, scale and shift, both
signs), with a constant slice along every dimension; other shapes' sets take ties values too. Red team 18's four
kernels wrong only at other shapes, off a fixed grid, on all-equal slices, or on negative ties fail. A problem with only
floating outputs does not run it. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "value_attacks"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", other_shapes=False)) as judge:
        yield judge


@pytest.fixture(scope="module")
def judge_shapes():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


@pytest.mark.parametrize("name,where", [("c3_argmax_last_tie.py", "correctness: ties:"), ("r18_c2_lasttie_offgrid.py", "correctness: ties:"),
                                        ("r18_c3_allequal_row.py", "correctness: ties:"), ("r18_c4_lasttie_negative.py", "correctness: ties:"),
                                        ("r18_c1_lasttie_othershapes.py", "other_shapes:")])
def test_a_kernel_wrong_only_on_ties_fails(judge_shapes, name, where):
    """Wrong on ties, it fails on the ties trial or, where one comes first, on a set of another shape that takes ties
    values (about one check in twenty met the latter first for r18_c2, CI-style runs of session 29)."""
    result = judge_shapes.evaluate(load_problem(TINY / "14_Argmax_Dim1.py"), load_candidate(FIXTURES / name))
    on_ties_elsewhere = where.endswith("ties:") and result.reason.startswith("other_shapes:") and "ties values" in result.reason
    assert result.status is Status.MISMATCH and (result.reason.startswith(where) or on_ties_elsewhere), result.reason


def test_an_honest_argmax_passes_with_ties(judge_shapes):
    result = judge_shapes.evaluate(load_problem(TINY / "14_Argmax_Dim1.py"), load_candidate(FIXTURES / "r18_honest_argmax.py"))
    assert (result.status, result.generality) == (Status.OK, "general"), result.reason
    assert "ties" in {t.name for t in result.trials}


def test_a_problem_with_floating_outputs_asks_no_ties_trial(judge):
    result = judge.evaluate(load_problem(TINY / "23_Softmax.py"), load_candidate(FIXTURES / "h1_softmax_online.py"))
    assert result.status is Status.OK, result.reason
    assert "ties" not in {t.name for t in result.trials} and "signed" in {t.name for t in result.trials}


@pytest.mark.parametrize("shape", [(4, 64, 16), (8, 5), (3, 2, 7), (2, 3)])
def test_the_ties_values_hold_a_negative_all_equal_line_along_every_dimension_another_slices(shape):
    """Whatever the kernel reduces over, lines along it that are all equal and negative, in every draw (seeded here; CI met a draw with no negative tie: red team 18's c4 passed)."""
    import random

    import torch

    from pipeline.judge.worker import _with_ties

    for seed in range(50):
        x = _with_ties(torch.rand(shape, generator=torch.Generator().manual_seed(seed)), random.Random(seed))
        for d in range(x.dim()):
            top, bottom = x.max(dim=d).values, x.min(dim=d).values
            assert ((top < 0) & (top == bottom)).any(), (seed, d)


# Held-out red team 19 (session 27, tests/fixtures/value_attacks2, README.md the table): a max clamped at 4096 and an
# argmax clamped there passed (no trial drew values past about 1000); a replay keyed on the first and last input values
# and the count passed (the repeats are the first trial's inputs, answered right). A large trial (the inputs times 2**13
# to 2**24; off by default, EvalOptions.large_trial says why) and an outliers trial on the first trial's draws (first
# and last elements kept, on by default) meet them.
FIXTURES2 = ROOT / "tests" / "fixtures" / "value_attacks2"


@pytest.fixture(scope="module")
def judge_large():
    with Judge(EvalOptions(device="cpu", other_shapes=False, large_trial=True)) as judge:
        yield judge


@pytest.mark.parametrize("name,problem,where", [("a_max_clamp.py", "13_Max_LastDim.py", "correctness: large:"),
                                                ("e_argmax_clamp.py", "14_Argmax_Dim1.py", "correctness: large:"),
                                                ("c_max_replay.py", "13_Max_LastDim.py", "correctness: outliers:")])
def test_a_kernel_wrong_only_on_large_values_or_replaying_on_a_few_values_fails(judge, judge_large, name, problem, where):
    result = (judge_large if where.endswith("large:") else judge).evaluate(load_problem(TINY / problem), load_candidate(FIXTURES2 / name))
    assert result.status is Status.MISMATCH and result.reason.startswith(where), result.reason


def test_red_team_19s_honest_max_passes_the_large_trial(judge_large):
    result = judge_large.evaluate(load_problem(TINY / "13_Max_LastDim.py"), load_candidate(FIXTURES2 / "d_max_honest.py"))
    assert result.status is Status.OK, result.reason
    assert {"large", "outliers"} <= {t.name for t in result.trials}
