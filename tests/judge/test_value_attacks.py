"""Held-out red team 17 (session 27; tests/fixtures/value_attacks, README.md the table): an argmax that returns the
last of tied maxima (torch returns the first) passed every check, since continuous draws never tie. A ties trial (the
problem's draws on a grid of quarters) is asked where the reference returns integers; a problem with only floating
outputs does not run it. CPU, Triton's interpreter."""

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


def test_a_kernel_wrong_only_on_ties_fails_the_ties_trial(judge):
    result = judge.evaluate(load_problem(TINY / "14_Argmax_Dim1.py"), load_candidate(FIXTURES / "c3_argmax_last_tie.py"))
    assert result.status is Status.MISMATCH and result.reason.startswith("correctness: ties:"), result.reason


def test_a_problem_with_floating_outputs_asks_no_ties_trial(judge):
    result = judge.evaluate(load_problem(TINY / "23_Softmax.py"), load_candidate(FIXTURES / "h1_softmax_online.py"))
    assert result.status is Status.OK, result.reason
    assert "ties" not in {t.name for t in result.trials} and "signed" in {t.name for t in result.trials}
