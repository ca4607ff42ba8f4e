"""`egg optimize`: set up the store, the model and the judge, run the stages, re-verify the winner in a fresh
process, and write best.py, report.md and evidence.json."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import LLMConfig
from pipeline.judge.judge import Judge
from pipeline.llm.accounting import Ledger
from pipeline.llm.client import CallSettings, LLMClient, open_client, open_transport
from pipeline.llm.retry import RetryPolicy
from pipeline.llm.spec import parse_spec
from pipeline.llm.transport import RetryingTransport, Transport
from pipeline.stages.optimize import Optimizer
from pipeline.stages.resume import StoreTransport
from pipeline.stages.script import AgentScript
from pipeline.stages.method import Budget
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.report.optimize import Outcome, write_outputs
from pipeline.store import Store
from pipeline.types import EvalOptions

RUN_FILE = "run.json"
STORE_FILE = "egg.sqlite"
# The winner is re-verified on inputs and weights it was never judged on: the run's seed plus this.
HELD_OUT_SEED_OFFSET = 1_000_003


class RunError(RuntimeError):
    """A run that cannot start or resume; the message says why and what to do."""


@dataclass(frozen=True)
class ModelChoice:
    """Either a configured model (pipeline.config's llm section) or a script file."""

    llm: LLMConfig | None = None
    script: Path | None = None

    def describe(self) -> str:
        return f"script {self.script}" if self.script else str(self.llm.spec)


def _client(choice: ModelChoice, store: Store, run_id: str) -> tuple[LLMClient, StoreTransport]:
    on_replay = None
    if choice.script is not None:
        script = AgentScript.load(choice.script)
        inner: Transport = RetryingTransport(script, RetryPolicy(jitter=0), 1, sleep=lambda _: None)
        settings = CallSettings(spec=parse_spec("openai:scripted"), max_tokens=8192)
        ledger, on_replay = Ledger(), script.skip
    else:
        base = open_client(choice.llm)  # raises ConfigError with a hint when no model is configured
        inner, settings, ledger = open_transport(choice.llm, choice.llm.spec), base.settings, base.ledger
    transport = StoreTransport(inner, store, run_id, on_replay)
    return LLMClient(transport, settings, ledger), transport


def _run_id(out: Path, store: Store, resume: bool, problem_fp: str) -> tuple[str, bool]:
    run_file = out / RUN_FILE
    if resume:
        if not run_file.exists():
            raise RunError(f"nothing to resume in {out}: no {RUN_FILE} (start without --resume)")
        run_id = json.loads(run_file.read_text())["run_id"]
        saved = store.run(run_id)
        if saved is None or saved["problem_fp"] != problem_fp:
            raise RunError(f"{out} holds a run of another problem (or a changed problem file): use another --out")
        return run_id, True
    if run_file.exists():
        raise RunError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
    run_id = uuid.uuid4().hex[:12]
    run_file.write_text(json.dumps({"run_id": run_id}))
    return run_id, False


def optimize(
    problem_path: str | Path,
    out: str | Path,
    choice: ModelChoice,
    options: EvalOptions,
    budget: Budget = Budget(),
    *,
    resume: bool = False,
    on_event: Callable[[str], None] = lambda message: None,
    profile_mode: str = "auto",
) -> Outcome:
    """Optimize one problem; everything lands in `out` (also the store, so a killed run can `resume`).
    `profile_mode` is pipeline.profiler's (auto, ncu, torch_profiler, static_only; cpu runs are always static_only)."""
    problem = load_problem(problem_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_FILE)
    try:
        run_id, resumed = _run_id(out, store, resume, problem.fingerprint)
        if not resumed:
            store.start_run(run_id, problem.path, problem.fingerprint, {"model": choice.describe(), "device": options.device, "budget": budget.__dict__})
        client, transport = _client(choice, store, run_id)
        on_event(f"run {run_id}{' (resumed)' if resumed else ''}: {problem.name} on {options.device}, model {choice.describe()}")
        if options.device == "cpu":
            on_event("device cpu: correctness only (Triton's interpreter); no kernel can be shown to be faster, so the first correct one is kept")
        with Judge(options) as judge:
            progress = Optimizer(problem, judge, client, store, run_id, out, budget, on_event, profiler=_profiler(options, profile_mode)).run()
            reference = judge.reference(problem)
        verify_options = dataclasses.replace(options, seed=options.seed + HELD_OUT_SEED_OFFSET)
        on_event(f"re-verifying the winner in a fresh process, on held-out seed {verify_options.seed}")
        final = _reverify(problem, out, progress.best_source, verify_options)
        outcome = Outcome(problem, run_id, options, choice.describe(), progress, final, client.ledger, reference.result, transport.replayed,
                          verify_seed=verify_options.seed if final is not None else None)
        write_outputs(out, outcome)
        store.finish_run(run_id, "done", dict(reference.result.get("environment", {})))
        return outcome
    finally:
        store.close()


def _profiler(options: EvalOptions, profile_mode: str):
    """pipeline.profiler in the asked mode (static sm_90 facts only without a GPU)."""
    from pipeline.profiler.profiling import ProfileOptions, profile_candidate
    from pipeline.profiler.report import compact

    mode = "static_only" if options.device == "cpu" else profile_mode
    return lambda candidate, problem: compact(profile_candidate(candidate, problem, ProfileOptions(mode=mode)))


def _reverify(problem, out: Path, source: str | None, options: EvalOptions):
    """The winner judged again by a new worker server, under `options` (a held-out seed: new weights, new inputs), so
    no state of the search can leak into the verdict and nothing fitted to the inputs it was judged on can pass."""
    if source is None:
        return None
    path = out / "candidates" / "winner.py"
    path.write_text(source, encoding="utf-8")
    with Judge(options) as judge:
        return judge.evaluate(problem, load_candidate(path))
