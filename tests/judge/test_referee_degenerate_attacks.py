"""A held-out red team on the float64 referee over degenerate problems (session 25, tests/fixtures/
referee_degenerate_attacks, its README): once the referee settled an fp32 output's one-element miss, the problem's
other outputs were compared as if the problem were not degenerate, so a constant fp16 output passed (closed: every
output the referee does not settle is compared as the plain check would). Two findings of the plain check, older
than the referee, stay open: a precision drop done by bit masks on a problem whose
outputs are far below atol (it passes most checks, not every one: a set of outlier values may push its signal error
over the bar, so no test asserts it) and an honest sum the fp32 reference's own rounding noise outweighs (its
checks take minutes on the CPU): both in its README. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "referee_degenerate_attacks"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", correctness_trials=2)) as judge:
        yield judge


def verdict(judge, candidate: str, problem: Path):
    return judge.evaluate(load_problem(problem), load_candidate(FIXTURES / candidate))


@pytest.fixture(scope="module")
def two_dtypes(tmp_path_factory) -> Path:
    """The red team's problem at 16,384 elements instead of 2,097,152 (the same mechanism; minutes less on the CPU)."""
    path = tmp_path_factory.mktemp("degenerate") / "problem_two_dtypes.py"
    path.write_text((FIXTURES / "problem_two_dtypes.py").read_text().replace("dim = 1 << 21", "dim = 1 << 14"))
    return path


@pytest.mark.parametrize("candidate", ["cand_dtype_skip.py", "cand_dtype_skip_control.py"])
def test_a_constant_second_output_fails_whether_or_not_the_referee_settles_the_first(judge, two_dtypes, candidate):
    result = verdict(judge, candidate, two_dtypes)
    assert result.status is Status.MISMATCH, result.reason
    said = ("degenerate problem: error relative to the reference's variation" in result.reason
            or "float64 referee: output 1, not an fp32 tensor the referee can settle: degenerate problem" in result.reason)
    assert said and not any(f.name == "fp32_refereed" for f in result.flags), result.reason
