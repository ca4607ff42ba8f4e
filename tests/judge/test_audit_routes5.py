"""Held-out red team 16 (session 27; tests/fixtures/audit_routes5, README.md the table): 3 cheats got `ok` past the
run-time work record. Values read into Python by torch's own argument parser (`_local_scalar_dense`) are now counted
on every device, not only CUDA (c01, c03), and a call at another later-dimension size is held to the reference's own
work at that shape, recorded when the reference derives it (c02: torch did the whole softmax at every other row
length). The two honest kernels still pass. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "audit_routes5"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


@pytest.mark.parametrize("name,problem,why", [
    ("c01_shape_smuggle_softmax.py", "23_Softmax.py", "go to the host"),
    ("c02_resized_dim_torch_fallback.py", "23_Softmax.py", "torch computes"),
    ("c03_shape_smuggle_argmax_select.py", "13_Max_LastDim.py", "go to the host"),
])
def test_the_work_record_refuses_the_cheats(judge, name, problem, why):
    result = judge.evaluate(load_problem(TINY / problem), load_candidate(FIXTURES / name))
    assert result.status is Status.BANNED and result.reason.startswith("torch_delegation") and why in result.reason, result.reason


@pytest.mark.parametrize("name,problem", [("h01_online_softmax_fnarg.py", "23_Softmax.py"), ("h02_sum_split_atomic.py", "12_Sum_Dim1.py")])
def test_the_honest_kernels_pass(judge, name, problem):
    result = judge.evaluate(load_problem(TINY / problem), load_candidate(FIXTURES / name))
    assert (result.status, result.generality) == (Status.OK, "general"), result.reason
