"""How much torch work a call on inputs of another shape may do (pipeline.judge.verdict.CandidateChecks._work_factor).

CI (session 28) banned an honest candidate, cuDNN's convolution beside a Triton ReLU and bias, on about half its
checks: a set of a square image asked again at a side drawn for the check (30 where its set had 17) was held to the
17 set's work times 30/17, while the convolution's work grows with both sides. Each check's reference run now
records its own work on every set of another shape, and the call is held to that. Real work records (torch's own
convolution under the judge's recorder), a test double of our own Verdict (no worker: the draw is then ours)."""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from pipeline.judge.probes import Work, WorkRecorder
from pipeline.judge.verdict import CandidateChecks, WorkerReport, _work_total, delegation_check

WEIGHT = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))
BIAS = torch.zeros(8, 1, 1)


def reference_work(side: int) -> dict:
    """The problem's own forward (convolution, ReLU, bias) at a square side, as the reference's run records it."""
    work, x = Work(), torch.rand(2, 3, side, side)
    with torch.no_grad(), WorkRecorder(work):
        torch.relu(F.conv2d(x, WEIGHT, padding=1)) + BIAS
    return work.to_json()


def candidate_work(side: int) -> dict:
    """An honest candidate's torch work at a side: the library convolution alone (its epilogue is Triton's)."""
    work, x = Work(), torch.rand(2, 3, side, side)
    with torch.no_grad(), WorkRecorder(work):
        F.conv2d(x, WEIGHT, padding=1)
    return work.to_json()


def checks_for(checked_reference: dict) -> CandidateChecks:
    """The checks of a problem at side 8 whose set `dim2` (side 17) is asked again at a side of 60 drawn for the check."""
    reference = types.SimpleNamespace(result={"work": reference_work(8), "ops": ["add", "convolution", "relu"], "min_bytes": 1,
                                              "derived": [{"name": "dim2", "resize": {"dim": 2, "nominal": 8, "new": 17},
                                                           "work": reference_work(17)}]})
    verdict = types.SimpleNamespace(reference=reference, checked_reference=checked_reference, comparer=None,
                                    draw=types.SimpleNamespace(derived=(
                                        {"name": "dim2", "resize": {"dim": 2, "nominal": 8, "new": 17}},
                                        {"name": "dim2_again", "again": "dim2", "resize": {"dim": 2, "nominal": 8, "new": 60}})))
    return CandidateChecks(verdict, WorkerReport(), outcome=None)  # type: ignore[arg-type]


def delegation(checks: CandidateChecks, report: WorkerReport):
    sizes = {d["name"]: checks._work_factor(d) for d in checks.draw.derived}
    return delegation_check(checks.reference.result, report, sizes)


def honest_report() -> WorkerReport:
    calls = [{"name": name, "kind": "tensor", "types": [], "tensors": [], "launches": 1, "own_launches": 1,
              "mutated_inputs": [], "threads_after": 0, "work": candidate_work(side)}
             for name, side in (("trial_1", 8), ("dim2", 17), ("dim2_again", 60))]
    return WorkerReport.model_validate({"calls": calls})


def test_a_set_asked_again_at_a_drawn_size_is_held_to_the_references_own_work_there():
    measured = {"dim2": reference_work(17), "dim2_again": reference_work(60)}
    checks = checks_for({"work_at": measured})
    nominal = reference_work(8)
    factor = checks._work_factor(checks.draw.derived[1])
    assert factor == _work_total(measured["dim2_again"]) / _work_total(nominal)
    result = delegation(checks, honest_report())
    assert result.passed, result.detail


def test_without_the_record_the_linear_estimate_falls_short_of_a_squares_work():
    """What the record fixes: the set's work scaled by the drawn side alone is below the work at 60x60 by more than
    the margin library work has, so the honest convolution read as torch doing the epilogue's job."""
    checks = checks_for({})
    estimate = checks._work_factor(checks.draw.derived[1])
    truth = _factor_of(reference_work(60))
    assert estimate * 1.5 < truth
    result = delegation(checks, honest_report())
    assert not result.passed and "dim2_again" in result.detail, result.detail


def test_a_candidate_doing_the_epilogue_in_torch_at_the_drawn_size_is_still_banned():
    measured = {"dim2": reference_work(17), "dim2_again": reference_work(60)}
    checks = checks_for({"work_at": measured})
    report = honest_report()
    report.calls[2].work = WorkerReport.model_validate({"calls": [{"name": "x", "kind": "tensor", "types": [], "tensors": [],
                                                                    "launches": 1, "own_launches": 1, "mutated_inputs": [],
                                                                    "threads_after": 0, "work": reference_work(60)}]}).calls[0].work
    result = delegation(checks, report)
    assert not result.passed and "dim2_again" in result.detail and "relu" in result.detail, result.detail


def _factor_of(work: dict) -> float:
    return _work_total(work) / _work_total(reference_work(8))
