"""`egg optimize`: one session in review mode `auto` (no gate waits), run in this process, with its store and
outputs in `--out`: best.py, report.md, evidence.json, egg.sqlite, run.json and candidates/."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import LLMConfig
from pipeline.problems.loader import load_problem, read_source
from pipeline.report.optimize import Outcome
from pipeline.sessions.backends import BackendSpec
from pipeline.sessions.runner import HELD_OUT_SEED_OFFSET, SessionSettings, drive
from pipeline.stages.method import Budget
from pipeline.store import Store, StoreError
from pipeline.types import EvalOptions

__all__ = ["HELD_OUT_SEED_OFFSET", "ModelChoice", "RunError", "optimize"]

RUN_FILE = "run.json"
STORE_FILE = "egg.sqlite"


class RunError(RuntimeError):
    """A run that cannot start or resume; the message says why and what to do."""


@dataclass(frozen=True)
class ModelChoice:
    """A configured model (pipeline.config's llm section), a script file, or the expert backend (neither)."""

    llm: LLMConfig | None = None
    script: Path | None = None

    def backend(self) -> BackendSpec:
        if self.script is not None:
            return BackendSpec("script", str(self.script))
        if self.llm is not None and self.llm.spec is not None:
            return BackendSpec("llm", str(self.llm.spec))
        return BackendSpec("expert")

    def describe(self) -> str:
        return self.backend().describe()


def _session_id(out: Path, store: Store, resume: bool, problem_fp: str) -> tuple[str, bool]:
    run_file = out / RUN_FILE
    if resume:
        if not run_file.exists():
            raise RunError(f"nothing to resume in {out}: no {RUN_FILE} (start without --resume)")
        session_id = json.loads(run_file.read_text())["run_id"]
        saved = store.session(session_id)
        if saved is None or saved.problem_fp != problem_fp:
            raise RunError(f"{out} holds a run of another problem (or a changed problem file): use another --out")
        return session_id, True
    if run_file.exists():
        raise RunError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
    session_id = uuid.uuid4().hex[:12]
    run_file.write_text(json.dumps({"run_id": session_id}))
    return session_id, False


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
    """Optimize one problem; everything lands in `out` (also the store, so a killed run can `resume`, under the
    settings it started with). `profile_mode` is pipeline.profiler's (auto, ncu, torch_profiler, static_only; cpu
    runs are always static_only)."""
    problem = load_problem(problem_path)
    out = Path(out).resolve()  # the session's folder is stored absolute
    out.mkdir(parents=True, exist_ok=True)
    try:
        store = Store(out / STORE_FILE)
    except StoreError as error:  # not an SQLite file, damaged, locked: one line
        raise RunError(str(error)) from None
    try:
        session_id, resumed = _session_id(out, store, resume, problem.fingerprint)
        if not resumed:
            settings = SessionSettings(budget, options, profile_mode)
            store.create_session(session_id, problem_path=problem.path, problem_name=problem.name, problem_fp=problem.fingerprint,
                                 problem_source=read_source(problem.path), backend=choice.backend().to_json(),
                                 review="auto", device=options.device, settings=settings.to_json(), work_dir=str(out))
        else:
            on_event(f"resuming run {session_id} from {out / STORE_FILE}")
        return drive(store, session_id, echo=on_event, llm_config=choice.llm)
    except StoreError as error:
        raise RunError(str(error)) from None
    finally:
        store.close()
