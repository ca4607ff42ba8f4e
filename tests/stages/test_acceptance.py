"""Stage 2 keeps only measured improvements, and stops near the physical floor (a scripted judge with timings)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.agents.backend import ModelBackend
from pipeline.llm.scripted import scripted_client
from pipeline.problems.loader import load_problem
from pipeline.sessions.gates import StoreGates
from pipeline.stages.method import Budget
from pipeline.stages.optimize import Optimizer
from pipeline.store import Store
from pipeline.types import Candidate, EvalOptions, EvalResult, Problem, Status, Timing

SOFTMAX = Path(__file__).resolve().parents[2] / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
EAGER_MS = 3.0


class TimedJudge:
    """A test double of the judge: every candidate passes, in the time its source announces (`# time: 1.5`)."""

    options = EvalOptions(device="cuda")

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        ms = float(re.search(r"# time: ([\d.]+)", Path(candidate.path).read_text()).group(1))
        timing = Timing(ms, ms, 0.01, ms * 0.99, ms * 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing,
                          speedups={"eager": EAGER_MS / ms}, physical_floor_ms=0.95)


def auto_optimizer(tmp_path: Path, judge, client, budget: Budget, **optional) -> Optimizer:
    """An Optimizer on a scripted model, in a session of review mode auto (no gate waits)."""
    store = Store(tmp_path / "egg.sqlite")
    problem = load_problem(SOFTMAX)
    store.create_session("r1", problem_path=problem.path, problem_name=problem.name, problem_fp=problem.fingerprint,
                         problem_source="", backend={"kind": "script"}, review="auto", device="cuda", settings={})
    return Optimizer(problem, judge, ModelBackend(client, "scripted"), store, "r1", tmp_path, StoreGates(store, "r1", "auto"), budget,
                     ledger=client.ledger, **optional)


def kernel(ms: float) -> str:
    return f'```json\n{{"paradigm": "p", "rationale": "r", "tunables": []}}\n```\n```python\n# time: {ms}\nclass ModelNew: pass\n```\n'


DIAGNOSIS = "```json\n" + json.dumps({"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "time_ms", "value": "2", "interpretation": "slow"}], "fixes": [{"change": "fuse", "expected_gain_pct": 20}]}]}) + "\n```"


def test_only_measured_improvements_are_kept_and_the_run_stops_near_the_floor(tmp_path):
    script = [kernel(2.0), kernel(1.5), DIAGNOSIS, kernel(1.6), DIAGNOSIS, kernel(1.0), DIAGNOSIS, kernel(0.995)]
    client, provider = scripted_client(script)
    progress = auto_optimizer(tmp_path, TimedJudge(), client, Budget(seeds=2, rounds=1, transforms=False)).run()
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


TUNABLE_KERNEL = """import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 32),)](x, y, x.numel(), BLOCK=32)
        return y
"""


class BlockJudge(TimedJudge):
    """Times a candidate by the BLOCK its launch uses: fastest at 128 (a bowl in log2(BLOCK))."""

    def evaluate(self, problem, candidate):
        source = Path(candidate.path).read_text()
        block = int(re.search(r"BLOCK=(\d+)", source).group(1))
        ms = 1.0 + abs(block.bit_length() - 8) * 0.25
        timing = Timing(ms, ms, 0.01, ms * 0.99, ms * 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing, speedups={"eager": EAGER_MS / ms})


def test_the_numbers_an_agent_names_are_searched_by_the_tuning_engine(tmp_path):
    tunables = [{"name": "BLOCK", "values": [32, 64, 128, 256, 512]}]
    rewrite = f'```json\n{{"paradigm": "p", "rationale": "r", "tunables": {json.dumps(tunables)}}}\n```\n```python\n{TUNABLE_KERNEL}```\n'
    seed = f"```python\n{TUNABLE_KERNEL.replace('BLOCK=32', 'BLOCK=512')}```\n"
    client, provider = scripted_client([seed, DIAGNOSIS, rewrite, DIAGNOSIS, "nonsense", "nonsense", "nonsense"])
    progress = auto_optimizer(tmp_path, BlockJudge(), client, Budget(seeds=1, rounds=1, tune_evals=6, transforms=False)).run()
    tuned = [a for a in progress.attempts if a.origin == "tune"]
    assert tuned and all(a.status == "ok" for a in tuned)
    assert "BLOCK=128" in progress.best_source and progress.best_ms == 1.0
    assert any(a.accepted for a in tuned)
