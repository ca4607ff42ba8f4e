"""The float64 referee (issue 39): where an fp32 comparison misses on tolerance alone, the reference computes the set
again in float64 and the candidate passes if it is as close to that truth as the fp32 reference is. A long fp32 sum's
own rounding is then no longer the kernel's failure; a wrong kernel still fails. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge
from pipeline.judge.compare import compare_outputs, disputable, referee
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "referee"
PROBLEM = FIXTURES / "long_row_sum.py"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


def test_a_kernel_closer_to_the_truth_than_the_fp32_reference_passes_and_the_verdict_says_why(judge):
    result = judge.evaluate(load_problem(PROBLEM), load_candidate(FIXTURES / "exact_row_sum.py"))
    assert result.status is Status.OK, result.reason
    flag = next(f.message for f in result.flags if f.name == "fp32_refereed")
    assert "outside atol=rtol=0.0001 against the fp32 reference, but as close to the float64 reference" in flag, flag


def test_a_kernel_farther_from_the_truth_than_the_reference_still_fails(judge):
    result = judge.evaluate(load_problem(PROBLEM), load_candidate(FIXTURES / "off_row_sum.py"))
    assert result.status is Status.MISMATCH, result.reason
    assert "float64 referee: output 0: " in result.reason and "farther from the float64 reference" in result.reason, result.reason
    assert not any(f.name == "fp32_refereed" for f in result.flags)


def test_the_referee_asks_as_much_as_the_reference_gives_and_no_more():
    generator = torch.Generator().manual_seed(7)
    truth = torch.randn(1000, generator=generator, dtype=torch.float64)
    reference = (truth + 1e-3 * torch.randn(1000, generator=generator, dtype=torch.float64)).float()  # its own error ~1e-3
    closer = (truth + 1e-4 * torch.randn(1000, generator=generator, dtype=torch.float64)).float()
    farther = (truth + 1e-2 * torch.randn(1000, generator=generator, dtype=torch.float64)).float()
    plain = compare_outputs("trial_1", [closer], [reference])
    assert disputable(plain)  # it misses the fp32 reference on tolerance alone
    assert referee([closer], [reference], [truth])[0]
    passed, detail = referee([farther], [reference], [truth])
    assert not passed and "farther from the float64 reference than the fp32 reference is" in detail
    off = reference.double() + 3 * (reference.double() - truth).abs().median()  # 3x the reference's typical error, everywhere
    assert not referee([off.float()], [reference], [truth])[0]
    with_nan = closer.clone()
    with_nan[3] = float("nan")
    assert not referee([with_nan], [reference], [truth])[0]
    assert not disputable(compare_outputs("trial_1", [with_nan], [reference]))  # NaN: never the referee's
    half = closer.half()
    assert not disputable(compare_outputs("trial_1", [half], [reference.half() + 1.0]))  # only fp32 misses go to it
