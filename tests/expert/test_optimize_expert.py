"""The expert backend in the method: `egg optimize` with no model (announced, a verified Triton best.py that
`egg check` passes), its proposals at the gates with their rules named, and on a timed device its tunables searched
by the tuning engine (a test double of the judge that times a GEMM by its tile)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.expert.backend import ExpertBackend
from pipeline.problems.loader import load_problem
from pipeline.sessions.gates import StoreGates
from pipeline.stages.method import Budget
from pipeline.stages.optimize import Optimizer
from pipeline.store import Store
from pipeline.types import Candidate, EvalOptions, EvalResult, Problem, Status, Timing
from tests.expert.problems import ROOT, tiny

EGG = [sys.executable, "-m", "pipeline.cli"]


def egg(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("EGG_LLM",)}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([*EGG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_egg_optimize_with_no_model_announces_the_expert_and_writes_a_verified_triton_best_py(tmp_path):
    problem = tiny("7_Linear_Residual_Tanh")
    out = tmp_path / "out"
    run = egg(["optimize", str(problem), "--device", "cpu", "--seeds", "2", "--rounds", "1", "--out", str(out)], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no model configured: using the expert backend" in run.stderr
    best = (out / "best.py").read_text()
    assert "@triton.jit" in best and "# egg-expert: " in best and "ModelNew = Model" not in best
    check = egg(["check", str(out / "best.py"), "--ref", str(problem), "--device", "cpu"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr

    store = Store(out / "egg.sqlite")
    session = store.sessions()[0]
    gates = store.gates(session.id)
    kernels = [g for g in gates if g.kind == "kernel" and g.payload["proposal"]]
    plans = [g for g in gates if g.kind == "plan" and g.payload["proposal"]]
    assert kernels and plans
    for gate in kernels:  # every proposal at its gate like a model's, with the rule that made it
        assert gate.payload["author"] == "expert" and gate.payload["rationale"].startswith("rule ")
        assert gate.payload["diff"] or gate.payload["rationale"].startswith("rule tune_only:")  # the same kernel, for its numbers
    assert "seed" in {g.payload["step"] for g in kernels}
    # Each stage's rewrite has its gate, or was the kernel already judged (tuned, no gate), with the rule that said so
    same = {e.data["stage"]: e.data["rationale"] for e in store.events(session.id) if e.kind == "same_kernel"}
    for stage in ("parallel_mapping", "tiling", "memory"):
        gated = [g for g in kernels if g.stage == stage and g.payload["step"] == "rewrite"]
        assert gated or same[stage].startswith("rule tune_only:"), stage
    for gate in plans:
        assert gate.payload["author"] == "expert" and gate.payload["proposal"]["bottlenecks"]
    store.close()


class TileJudge:
    """A test double of the judge on a timed device: every candidate passes; a GEMM whose tiles are grouped by 4
    along M takes 1 ms, any other 1.25 ms. No seed or structural variant groups by 4 (the template's default is 8,
    the swizzle variant toggles 1 and 8): only the tuning engine's search finds it."""

    options = EvalOptions(device="cuda")

    def __init__(self) -> None:
        self.judged: list[str] = []

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        source = Path(candidate.path).read_text()
        self.judged.append(source)
        ms = 1.0 if re.search(r"GROUP_M=4\b", source) else 1.25
        timing = Timing(ms, ms, 0.01, ms * 0.99, ms * 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing,
                          speedups={"eager": 2.0 / ms}, physical_floor_ms=0.1)


def test_on_a_timed_device_the_expert_tunables_are_searched_and_a_faster_configuration_kept(tmp_path):
    problem = load_problem(tiny("1_GEMM_Square").with_name("1_GEMM_Square.py"))
    store = Store(tmp_path / "egg.sqlite")
    store.create_session("e1", problem_path=problem.path, problem_name=problem.name, problem_fp=problem.fingerprint,
                         problem_source="", backend={"kind": "expert"}, review="auto", device="cuda", settings={})
    judge = TileJudge()
    budget = Budget(seeds=1, rounds=1, transforms=False, tune_evals=6)
    progress = Optimizer(problem, judge, ExpertBackend(), store, "e1", tmp_path, StoreGates(store, "e1", "auto"), budget).run()
    tuned = [a for a in progress.attempts if a.origin == "tune"]
    assert tuned and all(a.status == "ok" for a in tuned)
    assert any(a.accepted for a in tuned) and progress.best_ms == 1.0  # the seed took 1.25 ms
    assert re.search(r"GROUP_M=4\b", progress.best_source) and "# egg-expert: " in progress.best_source
    store.close()
