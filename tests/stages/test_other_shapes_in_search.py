"""In a search every pass is judged on inputs of other shapes too (they are sets of the check itself since session
21, about as cheap as one more trial): a kernel wrong on another batch never becomes the best, even when it is the
fastest, and its failure is a verdict like any other."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.llm.scripted import scripted_client
from pipeline.stages.method import Budget
from pipeline.types import Candidate, Check, EvalOptions, EvalResult, Problem, Status, Timing
from tests.stages.test_acceptance import auto_optimizer
from tests.stages.test_budget_order import Clock, kernel


class ShapesJudge:
    """A test double of the judge: `# ms: N` in a candidate's source is its median; `# literal sizes` makes it
    wrong on another batch. It records how each candidate was asked about other shapes."""

    options = EvalOptions(device="cuda")

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool | None]] = []

    def evaluate(self, problem: Problem, candidate: Candidate, *, other_shapes: bool | None = None) -> EvalResult:
        source = Path(candidate.path).read_text()
        self.asked.append((re.search(r"# (seed \d)", source).group(1), other_shapes))
        median = float(re.search(r"# ms: ([\d.]+)", source).group(1))
        timing = Timing(median, median, 0.01, median * 0.99, median * 1.01, 100, "cuda_events")
        if "# literal sizes" in source:
            check = Check("other_shapes", False, "wrong on inputs of another shape, leading size halved ([8, 64]): mismatch")
            return EvalResult(Status.MISMATCH, f"other_shapes: {check.detail}", problem, candidate, "cuda", checks=(check,))
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing, speedups={"eager": 2.0 / median},
                          checks=(Check("other_shapes", True, "general"),), generality="general")


def test_every_pass_is_judged_on_other_shapes_and_a_wrong_one_is_never_kept(tmp_path):
    judge = ShapesJudge()
    client, _ = scripted_client([kernel("seed 1 # ms: 1.0"), kernel("seed 2 # ms: 2.0"), kernel("seed 3 # ms: 0.5 # literal sizes")])
    progress = auto_optimizer(tmp_path, judge, client, Budget(seeds=3, rounds=0, transforms=False), clock=Clock()).run()
    assert [seed for seed, _ in judge.asked[:3]] == ["seed 1", "seed 2", "seed 3"]
    assert all(asked is None for _, asked in judge.asked)  # as the judge's options say (on by default)
    assert [(a.origin, a.status) for a in progress.attempts] == [("seed", "ok"), ("seed", "ok"), ("seed", "mismatch")]
    assert "# seed 1" in progress.best_source and progress.best_result.generality == "general"
