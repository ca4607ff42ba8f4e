"""The one facade egg's faces call: the CLI (`egg session`, `egg gate`), the web app's pages, and the tests.

Everything goes through the store: a session is created as a row and run by a worker process started from here;
a person's decision is validated here and appended as a row, which the waiting worker picks up. Nothing here runs
a model, a compile or a kernel, and nothing imports torch, so a web page stays responsive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pipeline
from pipeline.problems.loader import ProblemError, check_problem_source, decode_source, fingerprint_text, load_problem, read_source
from pipeline.config import ConfigError, LLMConfig
from pipeline.report.optimize import Outcome
from pipeline.sessions.backends import MODEL_KEY_VARIABLES, BackendError, BackendSpec, worker_environment
from pipeline.sessions.gatekinds import KINDS, REVIEW_MODES, DecisionError, Gate, check_decision
from pipeline.sessions.runner import OUTPUT_FILES, SessionSettings, drive
from pipeline.stages.method import STAGE_NAMES, Budget
from pipeline.store import BUSY_TIMEOUT_S, Contention, GateClosed, Store, StoreError
from pipeline.store.records import BenchRunRecord, CandidateRecord, DecisionRecord, EventRecord, GateRecord, SessionRecord
from pipeline.types import EvalOptions, EvalResult, from_jsonable

DB_VARIABLE = "EGG_DB"
BUSY_VARIABLE = "EGG_BUSY_TIMEOUT_S"  # how long one statement waits for a locked store (SQLite's busy timeout)
RETRY_VARIABLE = "EGG_STORE_RETRY_S"  # how long a worker then keeps retrying before it stops (the session stays resumable)
WORKER_RETRY_S = 180.0
DEVICES = ("auto", "cuda", "cpu")
WORKER_STALE_S = 10.0
NAME_MAX_BYTES = 255  # the longest file name Linux file systems take


class ApiError(ValueError):
    """Bad input from a person or a script (an unknown session or gate, a refused decision): one clear line."""


# the store -------------------------------------------------------------------------------------------------------


def default_db_path(environ: dict[str, str] | None = None) -> Path:
    """EGG_DB, else data/egg.sqlite in a checkout, else ~/.local/share/egg/egg.sqlite for an installed egg."""
    environ = os.environ if environ is None else environ
    if environ.get(DB_VARIABLE):
        return Path(environ[DB_VARIABLE]).expanduser()
    checkout = pipeline.ROOT / "data"
    if (checkout / "problems").is_dir():
        return checkout / "egg.sqlite"
    return Path.home() / ".local" / "share" / "egg" / "egg.sqlite"


def open_store(path: str | Path | None = None, contention: Contention = Contention()) -> Store:
    """The store at `path` (else EGG_DB, else the default), its busy timeout EGG_BUSY_TIMEOUT_S (30 s). A person's
    command does not retry a locked store: it says so in one line (StoreError)."""
    return Store(path or default_db_path(), busy_timeout_s=_seconds(BUSY_VARIABLE, BUSY_TIMEOUT_S), contention=contention)


def open_worker_store(path: str | Path) -> Store:
    """A worker's store: a lock longer than the busy timeout is retried with backoff for EGG_STORE_RETRY_S (180 s),
    each wait noted in the session's timeline, so contention does not end a session."""
    return open_store(path, Contention(patience_s=_seconds(RETRY_VARIABLE, WORKER_RETRY_S)))


def _seconds(variable: str, default: float) -> float:
    text = os.environ.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        raise StoreError(f"{variable}={text!r} is not a number of seconds") from None
    if value < 0:
        raise StoreError(f"{variable}={text!r} is negative")
    return value


# problems --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundledProblem:
    path: str
    name: str
    level: int | None
    collection: str  # "tiny" (CPU-sized) or "suite" (full size, for a GPU)

    @property
    def label(self) -> str:
        level = f"level {self.level}" if self.level is not None else "other"
        return f"{self.collection} / {level} / {self.name}"


def bundled_problems() -> list[BundledProblem]:
    """The problems that ship in data/problems, tiny ones first."""
    root = pipeline.ROOT / "data" / "problems"
    found = []
    for collection in ("tiny", "suite"):
        for path in sorted((root / collection).rglob("*.py")):
            problem = load_problem(path)
            found.append(BundledProblem(problem.path, problem.name, problem.level, collection))
    return sorted(found, key=lambda p: (p.collection != "tiny", p.level or 99, _numeric_prefix(p.name), p.name))


def _numeric_prefix(name: str) -> int:
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else 10**6


def check_problem_file(path: str | Path) -> None:
    """ApiError with the loader's one line unless `path` is a problem file (read, never run)."""
    try:
        load_problem(path)
    except ProblemError as error:
        raise ApiError(str(error)) from None


def check_problem_text(source: str, filename: str = "problem.py") -> str:
    """The CLI's loader on pasted or uploaded text: ApiError with the loader's message if it is not a problem, or
    if its file name cannot be saved; the plain file name it will be saved under."""
    name = check_problem_filename(filename)
    try:
        check_problem_source(source, name)
    except ProblemError as error:
        raise ApiError(str(error)) from None
    return name


def check_problem_filename(filename: str) -> str:
    """The name a pasted or uploaded problem is saved under (its last path part): refused before anything is made
    when no file system takes it (a NUL, more than 255 bytes) or it is not a .py file."""
    if "\0" in filename:
        raise ApiError("the file name holds a NUL character: give a plain name such as problem.py")
    name = Path(filename.strip()).name
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > NAME_MAX_BYTES:
        raise ApiError(f"the file name is {size} bytes long: a file name has {NAME_MAX_BYTES} at most")
    if not name.endswith(".py") or name == ".py":
        raise ApiError(f"{name or filename!r}: a problem is a .py file")
    return name


def uploaded_source(data: bytes, filename: str) -> str:
    """An uploaded file's text: UTF-8 (a byte-order mark dropped), else ApiError naming the first bad byte."""
    try:
        return decode_source(data, check_problem_filename(filename))
    except ProblemError as error:
        raise ApiError(str(error)) from None


# sessions --------------------------------------------------------------------------------------------------------


def create_session(store: Store, *, problem_path: str | Path | None = None, problem_source: str | None = None,
                   problem_filename: str = "problem.py", backend: BackendSpec, review: str = "every", device: str = "auto",
                   budget: Budget = Budget(), options: EvalOptions | None = None, profile_mode: str = "auto",
                   label: str = "", work_dir: str | Path | None = None, session_id: str | None = None) -> SessionRecord:
    """A new session (not yet running: `start_worker` runs it, or `run_here`). A problem is a file, or pasted or
    uploaded text. `work_dir`: the session's folder (default: sessions/<id> beside the store)."""
    if review not in REVIEW_MODES:
        raise ApiError(f"review must be one of {', '.join(REVIEW_MODES)}, not {review!r}")
    if device not in DEVICES:
        raise ApiError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    try:
        backend.check()
    except (BackendError, ConfigError) as error:
        raise ApiError(str(error)) from None
    if problem_source is None and problem_path is None:
        raise ApiError("a session needs a problem: a file, or its source")
    name = check_problem_text(problem_source, problem_filename) if problem_source is not None else None
    session_id = session_id or uuid.uuid4().hex[:12]
    owned = work_dir is None  # a folder we make is removed again when the session cannot be made; a given one never is
    work_dir = Path(work_dir).resolve() if work_dir is not None else store.path.parent / "sessions" / session_id
    try:
        path = _saved_problem(work_dir, name, problem_source) if name is not None else Path(problem_path)
        problem = load_problem(path)
        source = read_source(problem.path)
    except ProblemError as error:
        _discard(work_dir, owned)
        raise ApiError(str(error)) from None
    settings = SessionSettings(budget, options or EvalOptions(), profile_mode)
    try:
        store.create_session(session_id, problem_path=problem.path, problem_name=problem.name, problem_fp=problem.fingerprint,
                             problem_source=source, backend=backend.to_json(), review=review, device=device,
                             settings=settings.to_json(), work_dir=str(work_dir), label=label)
    except StoreError:
        _discard(work_dir, owned)
        raise
    work_dir.mkdir(parents=True, exist_ok=True)
    return store.session(session_id)


def _discard(work_dir: Path, owned: bool) -> None:
    if owned:
        shutil.rmtree(work_dir, ignore_errors=True)


def run_here(store: Store, session_id: str, *, echo: Callable[[str], None] = lambda message: None, llm_config=None) -> Outcome:
    """Run the session in this process to its end (no worker process): what `egg optimize` does."""
    get_session(store, session_id)
    return drive(store, session_id, echo=echo, llm_config=llm_config)


# egg optimize ----------------------------------------------------------------------------------------------------

RUN_FILE = "run.json"
STORE_FILE = "egg.sqlite"


class RunError(ApiError):
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


def _run_id(out: Path, store: Store, resume: bool, problem_fp: str) -> tuple[str, bool]:
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


def optimize(problem_path: str | Path, out: str | Path, choice: ModelChoice, options: EvalOptions, budget: Budget = Budget(), *,
             resume: bool = False, on_event: Callable[[str], None] = lambda message: None, profile_mode: str = "auto") -> Outcome:
    """`egg optimize`: one session in review mode `auto` (no gate waits), created like any other and run in this
    process, with its store and outputs in `out` (best.py, report.md, evidence.json, egg.sqlite, run.json and
    candidates/), so a killed run can `resume` under the settings it started with. `profile_mode` is
    pipeline.profiler's (auto, ncu, torch_profiler, static_only; cpu runs are always static_only)."""
    problem = load_problem(problem_path)
    out = Path(out).resolve()  # the session's folder is stored absolute
    out.mkdir(parents=True, exist_ok=True)
    try:
        store = Store(out / STORE_FILE)
    except StoreError as error:  # not an SQLite file, damaged, locked: one line
        raise RunError(str(error)) from None
    try:
        session_id, resumed = _run_id(out, store, resume, problem.fingerprint)
        if not resumed:
            create_session(store, problem_path=problem.path, backend=choice.backend(), review="auto", device=options.device, budget=budget,
                           options=options, profile_mode=profile_mode, work_dir=out, session_id=session_id)
        else:
            on_event(f"resuming run {session_id} from {out / STORE_FILE}")
        return run_here(store, session_id, echo=on_event, llm_config=choice.llm)
    except StoreError as error:
        raise RunError(str(error)) from None
    except Exception as error:
        if not _problem_does_not_run(error):
            raise
        raise RunError(f"{error} (the session is kept: {out / STORE_FILE})") from None  # one line, never a traceback
    finally:
        store.close()


def _problem_does_not_run(error: BaseException) -> bool:
    """The judge's ReferenceError: the problem itself could not be run (its module only loaded where it already is)."""
    judge = sys.modules.get("pipeline.judge.judge")
    return judge is not None and isinstance(error, judge.ReferenceError)


def _saved_problem(work_dir: Path, name: str, source: str) -> Path:
    """Pasted or uploaded source, saved in the session's folder (nothing is left behind when that fails)."""
    path = work_dir / "problem" / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    except OSError as error:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise ApiError(f"{name}: cannot be saved in {path.parent} ({error.strerror})") from None
    return path


def start_worker(store: Store, session_id: str) -> int:
    """Start the worker process that runs a session (detached: it outlives the caller); its pid."""
    record = get_session(store, session_id)
    if record.finished:
        raise ApiError(f"session {session_id} is {record.status}: nothing to run")
    if worker_alive(record):
        raise ApiError(f"session {session_id} already has a live worker (pid {record.worker_pid})")
    process = worker_process(store.path, session_id, BackendSpec.from_json(record.backend), Path(record.work_dir) / "worker.log")
    store.add_event(session_id, "worker", f"worker started (pid {process.pid})", {"pid": process.pid})
    return process.pid


def worker_process(db: str | Path, session_id: str, backend: BackendSpec, log: Path, gpu: str | None = None) -> subprocess.Popen:
    """`python -m pipeline.worker` for a session, in a process group of its own, its output appended to `log`, with
    its own provider's key only and (`gpu`) the GPUs it may see."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**worker_environment(backend, dict(os.environ)),  # its own provider's key only
           "PYTHONPATH": os.pathsep.join(p for p in (str(pipeline.ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "EGG_PIPELINE_ROOT": str(pipeline.ROOT)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pipeline.worker", "--db", str(db), "--session", session_id],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def worker_alive(record: SessionRecord, now: float | None = None) -> bool:
    """A fresh heartbeat from a process that still exists (a killed worker's last heartbeat stays fresh a while)."""
    if record.heartbeat_at is None or record.worker_pid is None:
        return False
    return (now or time.time()) - record.heartbeat_at < WORKER_STALE_S and pid_alive(record.worker_pid)


def pid_alive(pid: int) -> bool:
    """The process runs: it exists and is not a zombie (a killed worker whose parent died stays one until something
    reaps it, which an init that reaps nothing never does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:  # gone since, or no /proc: os.kill's answer stands
        return False


def get_session(store: Store, session_id: str) -> SessionRecord:
    record = store.session(session_id)
    if record is None:
        raise ApiError(f"no session {session_id!r} in {store.path}")
    return record


def list_sessions(store: Store, limit: int | None = None) -> list[SessionRecord]:
    return store.sessions(limit)


@dataclass(frozen=True)
class SessionView:
    """One session as a person sees it: the record, whether a worker runs it, its open gates and its decisions."""

    session: SessionRecord
    worker_alive: bool
    pending: list[Gate]
    decisions: list[DecisionRecord]

    def to_json(self) -> dict[str, Any]:
        s = self.session
        return {
            "id": s.id, "status": s.status, "stage": s.stage, "problem": s.problem_name, "problem_path": s.problem_path,
            "backend": s.backend.get("describe", s.backend.get("kind")), "review": s.review, "device": s.device,
            "worker_alive": self.worker_alive, "worker_pid": s.worker_pid if self.worker_alive else None,
            "parent_id": s.parent_id, "branch_gate_key": s.branch_gate_key, "error": s.error, "outcome": s.outcome,
            "created_at": s.created_at, "finished_at": s.finished_at, "work_dir": s.work_dir,
            "pending": [gate_json(g) for g in self.pending],
            "decisions": [dataclasses.asdict(d) for d in self.decisions],
        }


def session_view(store: Store, session_id: str) -> SessionView:
    record = get_session(store, session_id)
    return SessionView(record, worker_alive(record), [Gate.of(g) for g in store.gates(session_id, open_only=True)], store.decisions(session_id))


def gate_json(gate: GateRecord) -> dict[str, Any]:
    return {"id": gate.id, "kind": gate.kind, "stage": gate.stage, "key": gate.key, "ordinal": gate.ordinal,
            "reviewed": gate.reviewed, "created_at": gate.created_at, "payload": gate.payload,
            "decision": dataclasses.asdict(gate.decision) if gate.decision else None}


def gate_summary(gate: GateRecord) -> str:
    """One line of what a gate showed: the plan's top bottleneck and the profiler's class, a kernel's step and
    rationale, a verdict's status and time, what a stage end hands on (each kind's own summary)."""
    return Gate.of(gate).summary


def cancel(store: Store, session_id: str) -> SessionRecord:
    """Ask the session's worker to stop; a session with no live worker is cancelled at once."""
    record = get_session(store, session_id)
    if record.finished:
        raise ApiError(f"session {session_id} is already {record.status}")
    store.request_cancel(session_id)
    if not worker_alive(record):
        store.add_event(session_id, "cancelled", "cancelled (no worker was running it)")
        store.update_session(session_id, status="cancelled")
    return store.session(session_id)


def kill_worker(store: Store, session_id: str) -> None:
    """SIGKILL the session's worker (tests and people recovering a wedged machine); the session stays resumable."""
    record = get_session(store, session_id)
    if record.worker_pid:
        try:
            os.killpg(record.worker_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def resume(store: Store, session_id: str) -> int:
    """Start a worker for a session that has none (after a kill, a reboot, a restart of the app or an
    interruption); a failed session is retried (`reopen`)."""
    record = get_session(store, session_id)
    if record.status == "failed" and not worker_alive(record):
        reopen(store, session_id)
    return start_worker(store, session_id)


def reopen(store: Store, session_id: str) -> SessionRecord:
    """A failed session made resumable again: the worker re-runs it from the store (what it had done is replayed);
    the failure stays in its timeline."""
    record = get_session(store, session_id)
    if record.status != "failed":
        raise ApiError(f"session {session_id} is {record.status}, not failed")
    store.add_event(session_id, "retry", f"retrying the session, which had failed: {record.error}", {"error": record.error})
    store.update_session(session_id, status="interrupted", finished_at=None)
    return store.session(session_id)


def events(store: Store, session_id: str, after_id: int = 0) -> list[EventRecord]:
    get_session(store, session_id)
    return store.events(session_id, after_id)


# gates and decisions ---------------------------------------------------------------------------------------------


def gates(store: Store, session_id: str, *, open_only: bool = False, kind: str | None = None) -> list[Gate]:
    """The session's gates, oldest first, each with its payload typed by its kind (`Gate.data`)."""
    get_session(store, session_id)
    if kind is not None and kind not in KINDS:
        raise ApiError(f"no gate kind {kind!r}: one of {', '.join(KINDS)}")
    return [Gate.of(g) for g in store.gates(session_id, open_only=open_only) if kind is None or g.kind == kind]


def get_gate(store: Store, session_id: str, gate_id: int) -> Gate:
    gate = store.gate(gate_id)
    if gate is None or gate.session_id != session_id:
        raise ApiError(f"no gate {gate_id} in session {session_id}")
    return Gate.of(gate)


def gate_number(store: Store, gate: GateRecord) -> int:
    """The gate's number within its session (1 for the first), as the pages and `egg gate` show it."""
    return 1 + sum(1 for g in store.gates(gate.session_id, with_payload=False) if g.id < gate.id)


def gate_numbers(store: Store, session_id: str) -> dict[str, int]:
    """Each of the session's gates' number (1 for the first), by gate key."""
    return {g.key: n for n, g in enumerate(store.gates(session_id, with_payload=False), 1)}


def gate_by_key(store: Store, session_id: str, key: str) -> Gate | None:
    """The session's gate with this deterministic key (what a `Heard` names), or None."""
    return next((Gate.of(g) for g in store.gates(session_id) if g.key == key), None)


def heard_prompts(store: Store, session_id: str, heard) -> list[dict[str, Any]]:
    """The requests (system, messages) a `Heard` names, in its order: what the model was sent with the person's
    words in it."""
    return [r for r in (store.request(session_id, key) for key in heard.calls) if r is not None]


def decide(store: Store, session_id: str, gate_id: int, action: str, *, edit_text: str | None = None, feedback: str = "",
           who: str = "person") -> DecisionRecord:
    """Validate a decision and append it; the waiting worker goes on from it. Refused decisions change nothing."""
    record = get_session(store, session_id)
    gate = get_gate(store, session_id, gate_id)
    if gate.decision is not None:
        raise ApiError(f"gate {gate_id} is closed: it was decided {gate.decision.action} by {gate.decision.who}")
    if not gate.reviewed:
        raise ApiError(f"gate {gate_id} is not reviewed in this session's mode: it is decided automatically")
    if record.finished:
        raise ApiError(f"session {session_id} is {record.status}")
    try:
        after = check_decision(gate, action, edit_text, feedback_heard=record.backend.get("kind") != "none")
        return store.add_decision(gate.id, session_id, action, who, gate.payload.get("proposal"), after, feedback.strip())
    except DecisionError as error:
        raise ApiError(str(error)) from None
    except GateClosed as error:
        raise ApiError(str(error)) from None


def branch(store: Store, session_id: str, gate_id: int, *, label: str = "", review: str | None = None) -> SessionRecord:
    """A new session that shares everything up to `gate_id` (which is open again in it); not yet running. Its review
    mode is the source's, but `every` for a branch of an `auto` session (a branch is made to decide that gate)."""
    source = get_session(store, session_id)
    gate = get_gate(store, session_id, gate_id)
    review = review or ("every" if source.review == "auto" else source.review)
    if review not in REVIEW_MODES:
        raise ApiError(f"review must be one of {', '.join(REVIEW_MODES)}, not {review!r}")
    new_id = uuid.uuid4().hex[:12]
    work_dir = store.path.parent / "sessions" / new_id
    store.create_session(new_id, problem_path=source.problem_path, problem_name=source.problem_name, problem_fp=source.problem_fp,
                         problem_source=store.problem_source(session_id), backend=source.backend, review=review,
                         device=source.device, settings=source.settings, work_dir=str(work_dir), parent_id=session_id,
                         branch_gate_key=gate.key, label=label or f"branch of {session_id} at gate {gate_id}")
    store.copy_history(session_id, new_id, gate)
    store.add_event(new_id, "branched", f"branched from session {session_id} at its {gate.kind} gate {gate_id} ({gate.stage})",
                    {"parent_id": session_id, "gate_key": gate.key})
    work_dir.mkdir(parents=True, exist_ok=True)
    return store.session(new_id)


# results ---------------------------------------------------------------------------------------------------------


def candidates(store: Store, session_id: str) -> list[CandidateRecord]:
    get_session(store, session_id)
    return store.candidates(session_id)


def export(store: Store, session_id: str, out_dir: str | Path) -> list[Path]:
    """Copy best.py, report.md and evidence.json of a finished session into `out_dir`."""
    files = export_files(store, session_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        (out / name).write_bytes(data)
        written.append(out / name)
    return written


def export_files(store: Store, session_id: str) -> dict[str, bytes]:
    record = get_session(store, session_id)
    folder = Path(record.work_dir)
    missing = [name for name in OUTPUT_FILES if not (folder / name).is_file()]
    if missing:
        raise ApiError(f"session {session_id} is {record.status}: it has no {', '.join(missing)} yet (they are written when it ends)")
    return {name: (folder / name).read_bytes() for name in OUTPUT_FILES}


@dataclass(frozen=True)
class CandidateRow:
    """One candidate with the numbers its verdict gave (read in one query: pages show a thousand of these)."""

    id: int
    stage: str
    origin: str
    author: str
    parent_id: int | None
    note: str
    status: str | None  # None: not judged (yet)
    reason: str
    median_ms: float | None
    ci95_low_ms: float | None
    ci95_high_ms: float | None
    speedups: dict[str, float]
    created_at: str


def candidate_rows(store: Store, session_id: str) -> list[CandidateRow]:
    record = get_session(store, session_id)
    options_key = record.settings.get("options_key", "")
    rows = store.query(
        """
        SELECT c.id, c.stage, c.origin, c.author, c.parent_id, c.note, c.created_at, v.status,
               json_extract(v.result_json, '$.reason') AS reason,
               json_extract(v.result_json, '$.timing.median_ms') AS median_ms,
               json_extract(v.result_json, '$.timing.ci95_low_ms') AS low,
               json_extract(v.result_json, '$.timing.ci95_high_ms') AS high,
               json_extract(v.result_json, '$.speedups') AS speedups
        FROM candidates c LEFT JOIN verdicts v
          ON v.problem_fp = ? AND v.source_fp = c.source_fp AND v.options_key = ?
        WHERE c.session_id = ? ORDER BY c.id
        """,
        (record.problem_fp, options_key, session_id),
    )
    return [CandidateRow(r["id"], r["stage"], r["origin"], r["author"], r["parent_id"], r["note"], r["status"], r["reason"] or "",
                         r["median_ms"], r["low"], r["high"], json.loads(r["speedups"]) if r["speedups"] else {}, r["created_at"])
            for r in rows]


def candidate_marks(store: Store, session_id: str) -> dict[int, list[str]]:
    """What each candidate became in the session's record: the stages that handed it on, and `best.py` for the
    session's result (the same record best.py, report.md and evidence.json are written from)."""
    record = get_session(store, session_id)
    marks: dict[int, list[str]] = {}
    handed = store.handed_on(session_id)
    for stage in STAGE_NAMES:
        best = handed.get(stage)
        if best is not None:
            marks.setdefault(best, []).append(stage)
    best_id = record.outcome.get("best_id")
    if record.status == "done" and best_id is not None and not (record.outcome.get("keeps_reference") or record.outcome.get("best_is_reference")):
        marks.setdefault(best_id, []).append("best.py")
    return marks


@dataclass(frozen=True)
class CandidateDetail:
    row: CandidateRow
    source: str
    parent_source: str | None  # the parent candidate's, or the reference problem's for a seed
    verdict: EvalResult | None


def candidate_detail(store: Store, session_id: str, candidate_id: int) -> CandidateDetail:
    rows = {r.id: r for r in candidate_rows(store, session_id)}
    if candidate_id not in rows:
        raise ApiError(f"no candidate {candidate_id} in session {session_id}")
    row = rows[candidate_id]
    record = get_session(store, session_id)
    source = store.candidate_source(candidate_id) or ""
    parent = store.candidate_source(row.parent_id) if row.parent_id else store.problem_source(session_id)
    stored = store.verdict(record.problem_fp, fingerprint_text(source), record.settings.get("options_key", ""))
    return CandidateDetail(row, source, parent, from_jsonable(EvalResult, stored) if stored else None)


def find_candidate(store: Store, session_id: str, candidate_id: int) -> CandidateDetail | None:
    """`candidate_detail`, or None where the session has no such candidate."""
    try:
        return candidate_detail(store, session_id, candidate_id)
    except ApiError:
        return None


SAME_TIME = 0.01  # within 1% of its parent's time: as fast (timing noise, not a change)


@dataclass(frozen=True)
class Step:
    """One candidate of a stage against the kernel it was made from: what it tried, and what the judge found."""

    candidate_id: int
    parent_id: int | None
    origin: str
    tried: str  # the rewrite's own account (its note: the rule, the fix, the paradigm)
    status: str | None
    reason: str
    median_ms: float | None
    parent_ms: float | None  # the parent's time; for a seed (no parent), the reference's eager time

    @property
    def against(self) -> str:
        return f"candidate {self.parent_id}" if self.parent_id is not None else "eager"

    @property
    def ratio(self) -> float | None:
        """How many times faster than its parent (below 1: slower); None when either is untimed."""
        return self.parent_ms / self.median_ms if self.median_ms and self.parent_ms else None

    @property
    def outcome(self) -> str:
        if self.status is None:
            return "not judged"
        if self.status != "ok":
            return "failed"
        if self.ratio is None:
            return "passed, untimed"
        if abs(self.ratio - 1.0) < SAME_TIME:
            return "as fast"
        return "faster" if self.ratio > 1.0 else "slower"


@dataclass(frozen=True)
class StageAccount:
    """What a stage did: every candidate it made against its parent, faster, slower or failed, and why."""

    stage: str
    steps: tuple[Step, ...]

    def count(self, outcome: str) -> int:
        return sum(step.outcome == outcome for step in self.steps)

    def headline(self) -> str:
        if not self.steps:
            return f"{self.stage}: no candidate was made"
        parts = [f"{self.count(o)} {o}" for o in ("faster", "as fast", "slower", "failed", "passed, untimed", "not judged") if self.count(o)]
        many = len(self.steps) != 1
        return f"{self.stage}: {len(self.steps)} candidate{'s' * many}, against {'their parents' if many else 'its parent'}: " + ", ".join(parts)


def stage_account(store: Store, session_id: str, stage: str) -> StageAccount:
    """Every candidate of `stage`, each against the kernel it was made from (one query: candidate_rows)."""
    rows = candidate_rows(store, session_id)
    by_id = {r.id: r for r in rows}
    steps = []
    for row in rows:
        if row.stage != stage:
            continue
        parent = by_id.get(row.parent_id) if row.parent_id is not None else None
        if parent is not None:
            parent_ms = parent.median_ms if parent.status == "ok" else None
        else:  # a seed: against the reference, eager (its time is in the verdict's speedup)
            eager = row.speedups.get("eager")
            parent_ms = eager * row.median_ms if eager and row.median_ms else None
        steps.append(Step(row.id, row.parent_id, row.origin, row.note, row.status, row.reason, row.median_ms, parent_ms))
    return StageAccount(stage, tuple(steps))


@dataclass(frozen=True)
class BestKernel:
    """What a session's best.py is: a candidate (with its time), or the reference problem."""

    session_id: str
    candidate_id: int | None  # None: best.py is the reference
    source: str
    median_ms: float | None
    speedups: dict[str, float]
    label: str


def best_kernel(store: Store, session_id: str) -> BestKernel:
    """The session's best.py from the store (so a recorded session, whose folder stayed on another machine, has one
    too): its best candidate, or the reference problem when nothing passed or nothing beat it."""
    record = get_session(store, session_id)
    outcome = record.outcome
    best_id = outcome.get("best_id")
    reference = outcome.get("keeps_reference") or outcome.get("best_is_reference") or best_id is None
    if not record.finished or reference:
        why = "not finished" if not record.finished else "the reference problem (nothing beat it)"
        return BestKernel(session_id, None, store.problem_source(session_id) or "", None, {}, f"{record.id}: {why}")
    row = next((r for r in candidate_rows(store, session_id) if r.id == best_id), None)
    return BestKernel(session_id, best_id, store.candidate_source(best_id) or "", row.median_ms if row else None, row.speedups if row else {},
                      f"{record.id}: candidate {best_id}")


@dataclass(frozen=True)
class Divergence:
    """The first gate at which two sessions differ: a different gate, or the same gate decided differently."""

    number: int  # the gate's number in each session (they agree on everything before it)
    first: Gate | None  # None: that session has no gate there (it ended, or has not reached it)
    second: Gate | None

    @staticmethod
    def said(gate: Gate | None) -> str:
        if gate is None:
            return "no gate here"
        decision = f"{gate.decision.action} by {gate.decision.who}" + (f" ({gate.decision.feedback})" if gate.decision.feedback else "") \
            if gate.decision else "open"
        return f"{gate.spec.title.lower()} in {gate.stage}: {decision}"


def divergence(store: Store, first_id: str, second_id: str) -> Divergence | None:
    """Where two sessions of a problem part ways (a branch and its parent part at the branched gate), or None when
    their gates and decisions are the same throughout."""
    first, second = gates(store, first_id), gates(store, second_id)

    def decided(gate: Gate) -> tuple | None:
        d = gate.decision
        return None if d is None else (d.action, json.dumps(d.after, sort_keys=True), d.feedback)

    for number, (a, b) in enumerate(zip(first, second), 1):
        if a.key != b.key or decided(a) != decided(b):
            return Divergence(number, a, b)
    if len(first) != len(second):
        n = min(len(first), len(second))
        return Divergence(n + 1, first[n] if n < len(first) else None, second[n] if n < len(second) else None)
    return None


# learning --------------------------------------------------------------------------------------------------------


def record_prediction(store: Store, session_id: str, gate_key: str, who: str, predicted: str, actual: str) -> bool:
    """A learner's guess of the bottleneck before the plan is shown; True when it names the plan's top one."""
    get_session(store, session_id)
    return store.add_prediction(session_id, gate_key, who or "learner", predicted, actual)


def prediction_score(store: Store, who: str) -> tuple[int, int]:
    rows = store.predictions(who or "learner")
    return sum(r["correct"] for r in rows), len(rows)


RECORDED_DIR = pipeline.ROOT / "data" / "recorded"
BUNDLE_VERSION = 1


def export_bundle(store: Store, session_id: str, note: str = "") -> dict[str, Any]:
    """A finished session as one JSON value: enough to replay it gate by gate anywhere, with no GPU and no model."""
    record = get_session(store, session_id)
    rows = candidate_rows(store, session_id)
    sources = {r.id: store.candidate_source(r.id) for r in rows}
    verdicts = {str(r.id): store.verdict(record.problem_fp, fingerprint_text(sources[r.id]), record.settings.get("options_key", "")) for r in rows}
    bundle = {
        "version": BUNDLE_VERSION, "note": note,
        "session": {**dataclasses.asdict(record), "problem_source": store.problem_source(session_id), "worker_pid": None, "heartbeat_at": None},
        "gates": [gate_json(g) for g in store.gates(session_id)],
        "candidates": [{**dataclasses.asdict(r), "source": sources[r.id], "verdict": verdicts[str(r.id)]} for r in rows],
        "events": [{"at": e.at, "kind": e.kind, "message": e.message, "data": e.data} for e in store.events(session_id, 0, 100000)],
        "requests": store.requests(session_id),
    }
    # The machine it ran on stays out of the bundle: paths become relative to the session's folder or the checkout.
    text = json.dumps(bundle)
    for prefix, replacement in ((record.work_dir, "session"), (str(pipeline.ROOT), "."), (str(Path.home()), "~")):
        if prefix:
            text = text.replace(json.dumps(prefix)[1:-1], replacement)
    return json.loads(text)


def import_bundle(store: Store, bundle: dict[str, Any], *, label: str = "") -> SessionRecord:
    """A recorded session in this store (once: importing the same bundle again gives the same session)."""
    if bundle.get("version") != BUNDLE_VERSION:
        raise ApiError(f"not a recorded session of this egg (version {bundle.get('version')!r}, expected {BUNDLE_VERSION})")
    s = bundle["session"]
    existing = store.session(s["id"])
    if existing is not None:
        return existing
    with store.db.atomic():
        store.create_session(s["id"], problem_path=s["problem_path"], problem_name=s["problem_name"], problem_fp=s["problem_fp"],
                             problem_source=s["problem_source"], backend={**s["backend"], "recorded": True}, review=s["review"],
                             device=s["device"], settings=s["settings"], work_dir=s["work_dir"], label=label or s["label"] or "recorded")
        ids: dict[int, int] = {}
        for c in bundle["candidates"]:
            source_fp = fingerprint_text(c["source"])
            ids[c["id"]] = store.add_candidate(s["id"], c["stage"], c["origin"], c["source"], source_fp, ids.get(c["parent_id"]), c["note"], c["author"])
            if c["verdict"] is not None:
                store.save_verdict(s["problem_fp"], source_fp, s["settings"].get("options_key", ""), c["verdict"]["status"], c["verdict"])
        # This store numbers the candidates anew: every id the session's records hold is mapped to its new number.
        store.update_session(s["id"], status=s["status"], stage=s["stage"], outcome=_renumbered(s["outcome"], ids),
                             environment=s["environment"], finished_at=s["finished_at"])
        gate_ids: dict[int, int] = {}
        for g in bundle["gates"]:
            gate = store.open_gate(s["id"], g["key"], g["stage"], g["kind"], g["ordinal"], g["reviewed"], _renumbered(g["payload"], ids))
            gate_ids[g["id"]] = gate.id
            if g["decision"] is not None:
                d = g["decision"]
                store.add_decision(gate.id, s["id"], d["action"], d["who"], _renumbered(d["before"], ids), _renumbered(d["after"], ids),
                                   d["feedback"])
        for e in bundle["events"]:
            store.add_event(s["id"], e["kind"], e["message"], _renumbered(e["data"], ids, gate_ids))
    return store.session(s["id"])


_CANDIDATE_ID_KEYS = frozenset({"candidate_id", "best_id", "parent_id", "kernel_id"})


def _renumbered(value: Any, ids: dict[int, int], gate_ids: dict[int, int] | None = None) -> Any:
    """`value` (a payload, a decision, event data) with the candidate ids it holds mapped through `ids`: the fields
    named for a candidate, and the `id` of each entry of a stage end's `choices`; and `gate_id`s through `gate_ids`.
    (Event messages keep the recorded numbers: they are what was said at the time.)"""
    gate_ids = gate_ids or {}
    if isinstance(value, list):
        return [_renumbered(v, ids, gate_ids) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in _CANDIDATE_ID_KEYS and isinstance(item, int) and not isinstance(item, bool):
            out[key] = ids.get(item, item)
        elif key == "gate_id" and isinstance(item, int) and not isinstance(item, bool):
            out[key] = gate_ids.get(item, item)
        elif key == "choices" and isinstance(item, list):
            out[key] = [{**_renumbered(c, ids, gate_ids), "id": ids.get(c["id"], c["id"])} if isinstance(c, dict) and isinstance(c.get("id"), int)
                        else _renumbered(c, ids, gate_ids) for c in item]
        else:
            out[key] = _renumbered(item, ids, gate_ids)
    return out


def recorded_sessions() -> list[Path]:
    return sorted(RECORDED_DIR.glob("*.json")) if RECORDED_DIR.is_dir() else []


def import_recorded(store: Store) -> list[SessionRecord]:
    """Every bundled recorded session (data/recorded/*.json) in this store."""
    return [import_bundle(store, json.loads(path.read_text(encoding="utf-8"))) for path in recorded_sessions()]


# settings --------------------------------------------------------------------------------------------------------

KEY_NAMES = MODEL_KEY_VARIABLES


def keys_present(environ: dict[str, str] | None = None) -> dict[str, bool]:
    """Which model keys the environment holds. Never their values."""
    environ = os.environ if environ is None else environ
    return {name: bool(environ.get(name)) for name in KEY_NAMES}


def gpu_visible() -> bool:
    """Whether an NVIDIA GPU is visible to this machine (without importing torch or initializing CUDA)."""
    return Path("/dev/nvidiactl").exists() and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


# bench runs ------------------------------------------------------------------------------------------------------

RECORDED_BENCH_DIR = RECORDED_DIR / "bench"


def bench_runs(store: Store) -> list[BenchRunRecord]:
    return store.bench_runs()


def bench_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """A run's rows as results.jsonl holds them (for items not yet ended: what their sessions say now)."""
    from pipeline.bench.results import rows

    if store.bench_run(run_id) is None:
        raise ApiError(f"no bench run {run_id!r} in {store.path}")
    return rows(store, run_id)


def export_bench(store: Store, run_id: str, note: str = "") -> dict[str, Any]:
    """A bench run's record and rows as one JSON value (its sessions stay in their store): to show it elsewhere."""
    run = store.bench_run(run_id)
    if run is None:
        raise ApiError(f"no bench run {run_id!r} in {store.path}")
    header = {**dataclasses.asdict(run), "out_dir": Path(run.out_dir).name, "dirs": [Path(d).name for d in run.dirs]}
    header["args"] = {k: v for k, v in run.args.items() if k != "argv"}
    return {"version": BUNDLE_VERSION, "note": note, "run": header, "rows": bench_rows(store, run_id)}


def import_bench(store: Store, bundle: dict[str, Any]) -> BenchRunRecord:
    """A recorded bench run in this store (once): its rows, without its sessions (they did not travel)."""
    if bundle.get("version") != BUNDLE_VERSION:
        raise ApiError(f"not a recorded bench run of this egg (version {bundle.get('version')!r}, expected {BUNDLE_VERSION})")
    run = bundle["run"]
    existing = store.bench_run(run["id"])
    if existing is not None:
        return existing
    items = [{"problem": r["problem"], "path": r["problem"], "level": r["level"], "ordinal": n, "status": r["status"], "story": r.get("story", ""),
              "slot": r.get("slot", ""), "wall_s": r.get("wall_s"),
              "row_json": json.dumps({**r, "session_id": None, "recorded_session": r.get("session_id")}, sort_keys=True)}
             for n, r in enumerate(bundle["rows"])]
    store.create_bench_run(run["id"], out_dir=run["out_dir"], dirs=run["dirs"], args={**run["args"], "recorded": bundle.get("note", "") or True},
                           items=items, created_at=run["created_at"])
    store.update_bench_run(run["id"], status=run["status"], finished_at=run["finished_at"])
    return store.bench_run(run["id"])


def import_recorded_bench(store: Store) -> list[BenchRunRecord]:
    """Every bundled recorded bench run (data/recorded/bench/*.json) in this store."""
    paths = sorted(RECORDED_BENCH_DIR.glob("*.json")) if RECORDED_BENCH_DIR.is_dir() else []
    return [import_bench(store, json.loads(path.read_text(encoding="utf-8"))) for path in paths]
