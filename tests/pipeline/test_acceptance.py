"""Stage 2 keeps only measured improvements, and stops near the physical floor (a scripted judge with timings)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from egg.llm.scripted import scripted_client
from egg.pipeline.optimize import Optimizer
from egg.pipeline.stages import Budget
from egg.problems.loader import load_problem
from egg.store import Store
from egg.types import Candidate, EvalOptions, EvalResult, Problem, Status, Timing

SOFTMAX = Path(__file__).resolve().parents[2] / "problems" / "tiny" / "level1" / "23_Softmax.py"
EAGER_MS = 3.0


class TimedJudge:
    """A test double of the judge: every candidate passes, in the time its source announces (`# time: 1.5`)."""

    options = EvalOptions(device="cuda")

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        ms = float(re.search(r"# time: ([\d.]+)", Path(candidate.path).read_text()).group(1))
        timing = Timing(ms, ms, 0.01, ms * 0.99, ms * 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing,
                          speedups={"eager": EAGER_MS / ms}, physical_floor_ms=0.95)


def kernel(ms: float) -> str:
    return f'```json\n{{"paradigm": "p", "rationale": "r", "tunables": []}}\n```\n```python\n# time: {ms}\nclass ModelNew: pass\n```\n'


DIAGNOSIS = "```json\n" + json.dumps({"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "time_ms", "value": "2", "interpretation": "slow"}], "fixes": [{"change": "fuse", "expected_gain_pct": 20}]}]}) + "\n```"


def test_only_measured_improvements_are_kept_and_the_run_stops_near_the_floor(tmp_path):
    script = [kernel(2.0), kernel(1.5), DIAGNOSIS, kernel(1.6), DIAGNOSIS, kernel(1.0), DIAGNOSIS, kernel(0.995)]
    client, provider = scripted_client(script)
    store = Store(tmp_path / "egg.sqlite")
    problem = load_problem(SOFTMAX)
    store.start_run("r1", problem.path, problem.fingerprint, {})
    progress = Optimizer(problem, TimedJudge(), client, store, "r1", tmp_path, Budget(seeds=2, rounds=1)).run()
    kept = [(a.stage, a.median_ms) for a in progress.attempts if a.accepted]
    assert kept == [("algorithm", 2.0), ("algorithm", 1.5), ("tiling", 1.0)]  # 1.6 was slower: not kept
    assert progress.best_ms == 1.0
    # memory: 0.95 / 1.0 is within 90% of the floor, so no model call was spent on it
    assert len(provider.requests) == 6
    assert [(d.stage, d.summary) for d in progress.decisions] == [
        ("algorithm", "best seed"),
        ("parallel_mapping", "no improvement kept"),
        ("tiling", "kept a faster kernel"),
        ("memory", "no improvement kept"),
    ]
