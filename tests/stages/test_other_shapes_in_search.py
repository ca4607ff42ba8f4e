"""In a search, inputs of other shapes are judged for the passes the search would keep, not for every pass (on an
H100 that check cost about as much as the check itself: 22-40 s beside 17-28 s): a kernel wrong on another batch
never becomes the best, and its failure is a verdict like any other."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pipeline.llm.scripted import scripted_client
from pipeline.stages.method import Budget
from pipeline.types import Candidate, Check, EvalOptions, EvalResult, Problem, Status, Timing
from tests.stages.test_acceptance import auto_optimizer
from tests.stages.test_budget_order import Clock, kernel


class ShapesJudge:
    """A test double of the judge: `# ms: N` in a candidate's source is its median; `# literal sizes` makes it
    wrong on another batch. It records which candidates were judged on other shapes."""

    options = EvalOptions(device="cuda")

    def __init__(self) -> None:
        self.asked: list[str] = []

    def evaluate(self, problem: Problem, candidate: Candidate, *, other_shapes: bool | None = None) -> EvalResult:
        assert other_shapes is False  # the search decides which passes are judged there
        median = float(re.search(r"# ms: ([\d.]+)", Path(candidate.path).read_text()).group(1))
        timing = Timing(median, median, 0.01, median * 0.99, median * 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing, speedups={"eager": 2.0 / median})

    def check_other_shapes(self, problem: Problem, candidate: Candidate, verdict: EvalResult) -> EvalResult:
        source = Path(candidate.path).read_text()
        self.asked.append(re.search(r"# (seed \d)", source).group(1))
        if "# literal sizes" in source:
            check = Check("other_shapes", False, "wrong on inputs of another shape, leading size halved ([8, 64]): mismatch")
            return dataclasses.replace(verdict, status=Status.MISMATCH, reason=check.detail, checks=(*verdict.checks, check))
        return dataclasses.replace(verdict, generality="general", checks=(*verdict.checks, Check("other_shapes", True, "general")))


def test_only_a_pass_that_would_be_kept_is_judged_on_other_shapes(tmp_path):
    judge = ShapesJudge()
    client, _ = scripted_client([kernel("seed 1 # ms: 1.0"), kernel("seed 2 # ms: 2.0"), kernel("seed 3 # ms: 0.5 # literal sizes")])
    progress = auto_optimizer(tmp_path, judge, client, Budget(seeds=3, rounds=0, transforms=False), clock=Clock()).run()
    assert judge.asked == ["seed 1", "seed 3"]  # seed 2 is slower than the best: no need to know
    assert [(a.origin, a.status) for a in progress.attempts] == [("seed", "ok"), ("seed", "ok"), ("seed", "mismatch")]
    assert "# seed 1" in progress.best_source and progress.best_result.generality == "general"
