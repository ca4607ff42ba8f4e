"""The result is never worse than the reference: when the fastest verified candidate is slower than eager on a timed
device, best.py is the reference itself and says why."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.llm.accounting import Ledger
from pipeline.problems.loader import load_problem
from pipeline.report.optimize import Outcome, write_outputs
from pipeline.stages.method import Progress
from pipeline.types import Candidate, EvalOptions, EvalResult, Status, Timing

SOFTMAX = Path(__file__).resolve().parents[2] / "data" / "problems" / "suite" / "level1" / "23_Softmax.py"


def outcome(speedup: float) -> Outcome:
    problem = load_problem(SOFTMAX)
    timing = Timing(1.0, 1.0, 0.01, 0.99, 1.01, 100, "cuda_events")
    final = EvalResult(Status.OK, "passed every check", problem, Candidate("/c.py", "fp"), "cuda", timing=timing,
                       speedups={"eager": speedup, "compile": speedup * 0.9})
    progress = Progress(best_id=7, best_source="# the candidate\nclass ModelNew: pass\n", best_ms=1.0)
    return Outcome(problem, "s1", EvalOptions(device="cuda"), "expert", progress, final, Ledger(), {"baselines": {}}, 0, verify_seed=1)


def test_a_candidate_slower_than_eager_leaves_the_reference_as_best_py(tmp_path):
    slow = outcome(0.8)
    assert slow.keeps_reference and not slow.best_is_reference
    write_outputs(tmp_path, slow)
    best = (tmp_path / "best.py").read_text()
    assert "ModelNew = Model" in best and "# the candidate" not in best
    assert "nothing beat the reference: best.py is the reference itself (the fastest verified candidate, 7, reached 0.800x vs eager" in best
    assert json.loads((tmp_path / "evidence.json").read_text())["keeps_reference"] is True


def test_a_faster_candidate_is_best_py(tmp_path):
    fast = outcome(1.5)
    write_outputs(tmp_path, fast)
    assert not fast.keeps_reference and "# the candidate" in (tmp_path / "best.py").read_text()
