"""Held-out red team 21 (session 29, 14 files, tests/fixtures/redteam21/README.md): 7 cheats got `ok`. Closed here: the
judge told apart from a user's machine by the variables its sandbox sets (a01: TRITON_HOME), by the process's seed
(a02: torch.initial_seed), by the module's name (a04: __name__ reads egg_candidate), and a kernel that writes into
`torch.empty_like` of a transposed input as if it were contiguous (l02: a `transposed` layout set). Still open: an
expanded batch (l01), sizes past 16n + 15 (l03), another rank (l04). Both honest kernels pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
RED21 = ROOT / "tests" / "fixtures" / "redteam21"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


def _judged(judge, name: str, problem: str):
    return judge.evaluate(load_problem(TINY / problem), load_candidate(RED21 / name))


@pytest.mark.parametrize(("name", "finding"), [("a01_triton_home.py", "TRITON_HOME"), ("a02_initial_seed.py", "initial_seed"),
                                               ("a04_module_name.py", "__name__"), ("a03_rlimit_probe.py", "fallback"),
                                               ("a05_class_module.py", "__module__"), ("a06_knobs_getenv.py", "knobs.getenv"),
                                               ("a07_hub_dir.py", "hub.get_dir"), ("a08_knobs_home.py", "home_dir")])
def test_a_kernel_that_tells_the_judge_from_a_users_machine_is_banned(judge, name, finding):
    result = _judged(judge, name, "23_Softmax.py")
    assert result.status is Status.BANNED and finding in result.reason, result.reason


def test_a_kernel_that_writes_a_transposed_inputs_empty_like_as_contiguous_fails(judge):
    result = _judged(judge, "l02_empty_like_permuted.py", "23_Softmax.py")
    assert result.status is Status.MISMATCH and "transposed" in result.reason, result.reason


@pytest.mark.parametrize(("name", "problem"), [("h01_online_softmax.py", "23_Softmax.py"), ("h02_sum_tiles.py", "12_Sum_Dim1.py")])
def test_the_honest_kernels_pass(judge, name, problem):
    result = _judged(judge, name, problem)
    assert result.status is Status.OK, result.reason
