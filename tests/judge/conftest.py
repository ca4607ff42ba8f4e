"""Shared judges for the evaluator tests: real worker processes on the CPU (Triton's interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = ROOT / "data" / "problems" / "tiny"


def candidate(name: str):
    path = FIXTURES / "candidates" / name
    if not path.exists():
        path = ROOT / "examples" / "candidates" / name
    return load_candidate(path)


def problem(relative: str):
    for base in (TINY, FIXTURES / "problems"):
        if (base / relative).exists():
            return load_problem(base / relative)
    raise FileNotFoundError(relative)


@pytest.fixture(scope="session", autouse=True)
def private_caches(tmp_path_factory):
    """Every judge of the tests keeps its reference and compile caches in a temporary folder, not in ~/.cache/egg."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EGG_CACHE", str(tmp_path_factory.mktemp("egg-cache")))
        yield


@pytest.fixture(scope="session")
def cpu_judge():
    # other shapes off: these tests are about one check's calls (tests/judge/test_other_shapes.py has that check's)
    with Judge(EvalOptions(device="cpu", compile_timeout_s=60, run_timeout_s=60, other_shapes=False)) as judge:
        yield judge


@pytest.fixture(scope="session")
def impatient_judge():
    """Short timeouts, for candidates that hang."""
    with Judge(EvalOptions(device="cpu", compile_timeout_s=6, run_timeout_s=6, correctness_trials=2)) as judge:
        yield judge
