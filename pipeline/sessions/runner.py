"""Run one stored session to its end: build its backend, judge and gates, walk the method, re-verify the winner on
a held-out seed, write best.py, report.md and evidence.json into its folder. Re-running it replays what the store
already holds, so this is also how a session resumes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import LLMConfig
from pipeline.problems.loader import fingerprint_text, load_candidate, load_problem, read_source
from pipeline.report.optimize import Outcome, write_outputs
from pipeline.sessions.backends import BackendSpec, build_backend
from pipeline.sessions.devicelock import DeviceLock, LockedJudge
from pipeline.sessions.gates import POLL_S, StoreGates
from pipeline.stages.method import Budget
from pipeline.stages.optimize import Optimizer, environment_key
from pipeline.store import Store
from pipeline.store.records import GateRecord, SessionRecord
from pipeline.types import EvalOptions, EvalResult, Problem, from_jsonable, to_jsonable

# The winner is re-verified on inputs and weights it was never judged on: the session's seed plus this.
HELD_OUT_SEED_OFFSET = 1_000_003
OUTPUT_FILES = ("best.py", "report.md", "evidence.json")


@dataclass(frozen=True)
class SessionSettings:
    """What a session runs under (kept as JSON with the session): the budget, the judge's options, the profiler."""

    budget: Budget = Budget()
    options: EvalOptions = EvalOptions()  # `device` is the resolved one once the worker has started
    profile_mode: str = "auto"

    def to_json(self) -> dict[str, Any]:
        return {"budget": dataclasses.asdict(self.budget), "options": to_jsonable(self.options), "profile_mode": self.profile_mode}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionSettings:
        return cls(Budget(**data.get("budget", {})), from_jsonable(EvalOptions, data.get("options", {})), data.get("profile_mode", "auto"))


@dataclass
class SessionEvents:
    """Every step becomes an event row (the live timeline); `echo` also shows it to a person at a terminal."""

    store: Store
    session_id: str
    echo: Callable[[str], None] | None = None
    count: int = field(default=0)

    def __call__(self, message: str, kind: str = "info", **data: Any) -> None:
        self.store.add_event(self.session_id, kind, message, data)
        self.count += 1
        if self.echo is not None:
            self.echo(message)


def reference_cache(store: Store) -> Path:
    """The judge's reference cache beside the store: every session of a database shares its problems' references."""
    return store.path.parent / "cache" / "references"


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def session_problem(record: SessionRecord, store: Store) -> Problem:
    """The problem as it was when the session was made: its file if unchanged, else the stored source."""
    path = Path(record.problem_path)
    if path.is_file() and fingerprint_text(read_source(path)) == record.problem_fp:
        return load_problem(path)
    copy = Path(record.work_dir) / "problem" / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(store.problem_source(record.id), encoding="utf-8")
    return load_problem(copy)


def run_session(store: Store, session_id: str, *, echo: Callable[[str], None] | None = None,
                llm_config: LLMConfig | None = None, poll_s: float = POLL_S) -> Outcome:
    """Run (or resume) a session until it ends; SessionCancelled propagates when a cancel is seen."""
    from pipeline.judge.judge import Judge

    record = store.session(session_id)
    events = SessionEvents(store, session_id, echo)
    settings = SessionSettings.from_json(record.settings)
    device = resolve_device(record.device)
    options = dataclasses.replace(settings.options, device=device)
    problem = session_problem(record, store)
    work_dir = Path(record.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    built = build_backend(BackendSpec.from_json(record.backend), store, session_id, problem.name, llm_config,
                          problem_source=read_source(problem.path))
    events(f"session {session_id}: {problem.name} on {device}, backend {built.backend.name}, review {record.review}", "session",
           device=device, backend=built.backend.name)
    if device == "cpu":
        events("device cpu: correctness only (Triton's interpreter); no kernel can be shown to be faster, so the first correct one is kept", "info")
    gates = StoreGates(store, session_id, record.review, poll_s=poll_s, on_wait=lambda gate: _waiting(store, events, gate),
                       on_resume=lambda gate: _decided(store, events, gate))
    lock = DeviceLock(device, on_wait=lambda: events("waiting for the GPU: another session is timing a kernel", "info")) if device == "cuda" else None
    with Judge(options, cache_dir=reference_cache(store)) as judge:
        optimizer = Optimizer(problem, LockedJudge(judge, lock), built.backend, store, session_id, work_dir, gates, settings.budget, events,
                              profiler=_profiler(options, settings.profile_mode, lock), ledger=built.ledger)
        store.update_session(session_id, settings={**record.settings, "options_key": optimizer.options_key})  # its verdicts' key
        progress = optimizer.run()
        reference = judge.reference(problem)
    verify = dataclasses.replace(options, seed=options.seed + HELD_OUT_SEED_OFFSET)
    skipped, past_s = _not_kept(progress.best_result), 0.0
    if skipped:
        events(f"re-verification skipped: {skipped}", "reverify_skipped")
        final = progress.best_result
    else:
        if progress.best_source is not None:
            events(f"re-verifying the winner in a fresh process, on held-out seed {verify.seed}", "reverify")
        final = reverify(store, problem, work_dir, progress.best_source, verify, lock)
        past_s = _past_budget_s(settings.budget.max_wall_s, optimizer)
        if past_s > 0:
            events(f"the re-verification ended {past_s:.0f} s past the {settings.budget.max_wall_s:g} s wall budget: a kernel "
                   "kept as best.py is always judged again", "reverify_past_budget")
    replayed = built.transport.replayed if built.transport else 0
    outcome = Outcome(problem, session_id, options, built.backend.name, progress, final, built.ledger, reference.result, replayed,
                      verify_seed=verify.seed if final is not None and not skipped else None, reverify_skipped=skipped,
                      reverify_past_budget_s=past_s,
                      profile=winner_profile(store, problem, progress.best_source, progress.best_result, final))
    write_outputs(work_dir, outcome)
    store.update_session(session_id, outcome=outcome_summary(outcome), environment=dict(reference.result.get("environment", {})))
    events(outcome.headline(), "done", best_is_reference=outcome.best_is_reference)
    if outcome.versus_compile():
        events(outcome.versus_compile(), "versus_compile")
    return outcome


def winner_profile(store: Store, problem: Problem, source: str | None, *results: EvalResult | None) -> dict[str, Any] | None:
    """The kept kernel's profile (a ProfileReport as JSON) where the run took one: the Profile role's, stored under
    the kernel's source and the environment of its verdict (the search's, or the re-verification's); else None."""
    if source is None:
        return None
    source_fp = fingerprint_text(source)
    for result in results:
        if result is None:
            continue
        kept = store.profile(problem.fingerprint, source_fp, environment_key(result.environment))
        if kept is not None:
            return kept
    return None


def ending(error: BaseException) -> str:
    """How an exception ends a session: `interrupted` (resumable as it is) for a fault of the machinery around it
    (the store locked past every retry or damaged, the disk, a model provider still down after its retries), or
    `failed` for a dead end of the session itself (a missing script or key, a problem that no longer loads). A
    KeyboardInterrupt or a lost claim leaves the status alone: the session is resumable, or another worker's."""
    from pipeline.llm.errors import RETRYABLE, LLMCallError
    from pipeline.store import StoreError

    if not isinstance(error, Exception):
        return ""
    if isinstance(error, (StoreError, OSError)) or (isinstance(error, LLMCallError) and error.status in RETRYABLE):
        return "interrupted"
    return "failed"


def drive(store: Store, session_id: str, **kwargs: Any) -> Outcome | None:
    """run_session with the session's status kept: running, then done, cancelled, failed (with the error), or
    interrupted (with the fault: `egg session resume` goes on from the store)."""
    from pipeline.sessions.gates import SessionCancelled
    from pipeline.store import now_text

    store.update_session(session_id, status="running", error="")
    try:
        outcome = run_session(store, session_id, **kwargs)
    except SessionCancelled:
        store.add_event(session_id, "cancelled", "the session was cancelled")
        store.update_session(session_id, status="cancelled", finished_at=now_text())
        return None
    except BaseException as error:
        _record_ending(store, session_id, ending(error), f"{type(error).__name__}: {error}")
        raise
    store.update_session(session_id, status="done", finished_at=now_text())
    return outcome


def _record_ending(store: Store, session_id: str, status: str, message: str) -> None:
    """The session's status and reason after an exception; a store too broken to take them leaves it `running`
    with no worker, which is resumable too (the worker's log has the reason)."""
    from pipeline.store import StoreError, now_text

    if not status:
        return
    try:
        if status == "failed":
            store.add_event(session_id, "failed", f"the session failed: {message}")
            store.update_session(session_id, status="failed", error=message, finished_at=now_text())
        else:
            store.add_event(session_id, "interrupted", f"the session was interrupted: {message}; egg session resume {session_id} goes on from here")
            store.update_session(session_id, status="interrupted", error=message)
    except StoreError as error:
        print(f"egg worker: could not record that the session {status}: {error}", file=sys.stderr, flush=True)


def _not_kept(best: EvalResult | None) -> str:
    """Why the search's winner is not judged again ("" when it is): only a kernel that best.py will be is
    re-verified; one slower than eager leaves best.py the reference. A winner is never left unverified for the wall
    budget: its time is reserved from the start, and a run whose estimate fell short ends past the budget."""
    if best is None or not best.ok or not best.speedups or best.speedups.get("eager", 0.0) > 1.0:
        return ""
    return f"best.py is the reference: the fastest verified kernel reached {best.speedups['eager']:.3f}x of eager"


def _past_budget_s(budget_s: float | None, optimizer) -> float:
    return max(0.0, optimizer.clock() - optimizer.started - budget_s) if budget_s is not None else 0.0


def _reverify_key(options: EvalOptions) -> str:
    return hashlib.sha256(json.dumps(to_jsonable(options), sort_keys=True).encode()).hexdigest()[:16]


def reverify(store: Store, problem: Problem, work_dir: Path, source: str | None, options: EvalOptions, lock: DeviceLock | None) -> EvalResult | None:
    """The winner judged again by a new worker server under `options` (a held-out seed: new weights, new inputs),
    so no state of the search can leak into the verdict. Kept in the store: a resumed session does not redo it."""
    from pipeline.judge.judge import Judge

    if source is None:
        return None
    key = _reverify_key(options)
    stored = store.verdict(problem.fingerprint, fingerprint_text(source), key)
    if stored is not None:
        return from_jsonable(EvalResult, stored)
    path = work_dir / "candidates" / "winner.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    with Judge(options, cache_dir=reference_cache(store)) as judge:
        result = LockedJudge(judge, lock).evaluate(problem, load_candidate(path))
    store.save_verdict(problem.fingerprint, fingerprint_text(source), key, result.status.value, to_jsonable(result))
    return result


def outcome_summary(outcome: Outcome) -> dict[str, Any]:
    final = outcome.final
    return {
        "headline": outcome.headline(),
        "best_is_reference": outcome.best_is_reference,
        "keeps_reference": outcome.keeps_reference,
        "versus_compile": outcome.versus_compile(),  # "" unless best.py is a kernel slower than torch.compile, else why
        "generality": final.generality if final else "",  # on inputs of other shapes: general, specialised, or not judged
        "best_id": outcome.progress.best_id,  # the fastest verified candidate; best.py is the reference when keeps_reference
        "best_ms": outcome.progress.best_ms,
        "speedups": final.speedups if final and final.ok else {},
        "final_status": final.status.value if final else None,
        "reverified": final is not None and not outcome.reverify_skipped,
        "stopped": outcome.progress.stopped,
        "candidates": len(outcome.progress.attempts),
        # what a suite's results need without reading the session's files (egg bench)
        "timing": _interval(to_jsonable(final.timing)) if final and final.ok and final.timing else None,
        "baselines": {name: _interval(t) for name, t in outcome.reference.get("baselines", {}).items() if isinstance(t, dict)},
        "stages": [{"stage": d.stage, "median_ms": d.median_ms, "candidate_id": d.candidate_id} for d in outcome.progress.decisions],
        "llm": outcome.ledger.total().model_dump(include={"calls", "failed_calls", "input_tokens", "output_tokens", "cost_usd", "unpriced_calls"}),
    }


def _interval(timing: dict) -> dict:
    return {k: timing.get(k) for k in ("median_ms", "ci95_low_ms", "ci95_high_ms", "trials", "method")}


def _waiting(store: Store, events: SessionEvents, gate: GateRecord) -> None:
    store.update_session(gate.session_id, status="waiting", stage=gate.stage)
    events(f"waiting at the {gate.kind} gate of {gate.stage} (gate {gate.id})", "gate_open", gate_id=gate.id, gate_kind=gate.kind)


def _decided(store: Store, events: SessionEvents, gate: GateRecord) -> None:
    store.update_session(gate.session_id, status="running")
    d = gate.decision
    events(f"gate {gate.id} ({gate.kind}): {d.action} by {d.who}" + (f": {d.feedback}" if d.feedback else ""), "gate_decided",
           gate_id=gate.id, action=d.action)


def _profiler(options: EvalOptions, profile_mode: str, lock: DeviceLock | None):
    """pipeline.profiler in the asked mode (static sm_90 facts only without a GPU), holding the device's lock."""
    from pipeline.profiler.profiling import ProfileOptions, profile_candidate

    mode = "static_only" if options.device == "cpu" else profile_mode

    def profile(candidate: str, problem: str):
        if lock is None:
            return profile_candidate(candidate, problem, ProfileOptions(mode=mode))
        with lock:
            return profile_candidate(candidate, problem, ProfileOptions(mode=mode))

    return profile
