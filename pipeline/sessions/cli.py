"""`egg session ...` and `egg gate ...`: review a session from a terminal, or drive one from a script.

Every command takes `--db PATH` (else EGG_DB, else data/egg.sqlite in a checkout). Bad input gets one line and exit
status 2, and changes nothing: that includes a store that is not an SQLite file, is damaged, or stays locked past
its busy timeout, and files that are not UTF-8.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from pipeline import api
from pipeline.problems.loader import ProblemError, read_source
from pipeline.sessions.backends import BackendError, BackendSpec, default_backend
from pipeline.stages.method import Budget
from pipeline.store import StoreError


class _Commands(typer.Typer):
    """Every command's StoreError (a damaged or locked store, met after it was opened) becomes its one line."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)
        return lambda function: register(_store_errors_in_one_line(function))


def _store_errors_in_one_line(function: Callable) -> Callable:
    @functools.wraps(function)
    def command(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except StoreError as error:
            _fail(str(error))

    return command


session_app = _Commands(help="Sessions: one problem through the method, stopping at gates for a person.", no_args_is_help=True)
gate_app = _Commands(help="Gates: where a session waits for a person's decision.", no_args_is_help=True)
out = Console()
err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the terminal width

DbOption = typer.Option(None, "--db", envvar=api.DB_VARIABLE, help="The store (default: data/egg.sqlite in a checkout).")
JsonOption = typer.Option(False, "--json", help="Print JSON.")


class Review(str, Enum):
    every = "every"
    plans = "plans"
    stage_ends = "stage_ends"
    auto = "auto"


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Action(str, Enum):
    approve = "approve"
    edit = "edit"
    reject = "reject"
    skip = "skip"
    stop = "stop"


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _store(db: Path | None):
    try:
        return api.open_store(db)
    except StoreError as error:  # not an SQLite file, damaged, locked
        _fail(str(error))
    except Exception as error:  # an unreadable file, a folder that cannot be made
        _fail(f"cannot open the store {db or api.default_db_path()}: {error}")


def _config_path(config: Path | None) -> str:
    """The egg.yaml a session's model settings come from: --config, else ./egg.yaml if there is one."""
    if config is not None:
        if not config.is_file():
            _fail(f"{config}: no such config file")
        return str(config.resolve())
    default = Path("egg.yaml")
    return str(default.resolve()) if default.is_file() else ""


def _backend(llm: str | None, script: Path | None, no_llm: bool, expert: bool, config: Path | None = None) -> BackendSpec:
    chosen = [name for name, on in (("--llm", llm), ("--script", script), ("--no-llm", no_llm), ("--expert", expert)) if on]
    if len(chosen) > 1:
        _fail(f"choose one backend, not {' and '.join(chosen)}")
    try:
        if llm:
            return BackendSpec("llm", llm, _config_path(config))
        if script:
            if not script.is_file():
                _fail(f"{script}: no such script file")
            return BackendSpec("script", str(script.resolve()))
        if no_llm:
            return BackendSpec("none")
        if expert:
            return BackendSpec("expert")
        spec = default_backend(_config_path(config))
    except BackendError as error:
        _fail(str(error))
    if spec.kind == "expert":
        err.print("no model configured: using the expert backend")
    return spec


@session_app.command("start")
def start(
    problem: Path = typer.Argument(..., help="A KernelBench-format problem file."),
    llm: str | None = typer.Option(None, "--llm", help="PROVIDER:MODEL\\[@BASE_URL]."),
    script: Path | None = typer.Option(None, "--script", help="A YAML file of scripted replies per agent."),
    no_llm: bool = typer.Option(False, "--no-llm", help="No model: plans by rules, a person writes every kernel."),
    expert: bool = typer.Option(False, "--expert", help="egg's expert backend (rules, templates and search; no model)."),
    config: Path | None = typer.Option(None, "--config", help="YAML config for the model (default: ./egg.yaml)."),
    review: Review = typer.Option(Review.every, help="Which gates wait for a person."),
    device: Device = typer.Option(Device.auto, help="cuda (timed) or cpu (correctness only); auto picks."),
    seeds: int = typer.Option(3, min=1, max=5, help="Seeds of different paradigms in stage 1."),
    rounds: int = typer.Option(2, min=0, help="Profile/rewrite rounds per hardware sub-stage."),
    debug_rounds: int = typer.Option(2, min=0, help="Repairs per failing candidate."),
    transforms: bool = typer.Option(True, "--transforms/--no-transforms", help="Stage 1: expert transformations of each correct seed."),
    tune_evals: int = typer.Option(6, min=0, help="Configurations judged per tuning search (GPU)."),
    max_llm_calls: int = typer.Option(120, min=1, help="Budget: model calls."),
    label: str = typer.Option("", help="A name for the session."),
    detach: bool = typer.Option(False, "--detach", help="Run it in a background worker and return at once."),
    db: Path | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Create a session and run it (in the foreground, or in a background worker with --detach). The first line
    printed is its id (with --json, a JSON object with an `id` field)."""
    spec = _backend(llm, script, no_llm, expert, config)
    try:
        api.check_problem_file(problem)  # before the store is opened (or made): a refusal creates nothing
    except api.ApiError as error:
        _fail(str(error))
    store = _store(db)
    budget = Budget(seeds=seeds, rounds=rounds, debug_rounds=debug_rounds, transforms=transforms, tune_evals=tune_evals, max_llm_calls=max_llm_calls)
    try:
        record = api.create_session(store, problem_path=problem, backend=spec, review=review.value, device=device.value, budget=budget, label=label)
    except api.ApiError as error:
        _fail(str(error))
    print(json.dumps({"id": record.id, "db": str(store.path), "work_dir": record.work_dir}) if as_json else record.id, flush=True)
    if detach:
        pid = api.start_worker(store, record.id)
        err.print(f"worker {pid} runs session {record.id}; follow it with: egg session show {record.id}", highlight=False)
        return
    _run_foreground(store, record.id)


def _run_foreground(store, session_id: str) -> None:
    from pipeline.worker import work

    code = work(str(store.path), session_id, echo=lambda message: err.print(message, markup=False, highlight=False), hard_stop=True)
    final = store.session(session_id)
    err.print(f"session {session_id}: {final.status}" + (f" - {final.outcome.get('headline')}" if final.outcome.get("headline") else "")
              + (f" ({final.error})" if final.error else ""), highlight=False)
    if final.outcome.get("versus_compile"):
        err.print(final.outcome["versus_compile"], markup=False, highlight=False)
    raise typer.Exit(code)


@session_app.command("resume")
def resume_command(session_id: str = typer.Argument(...), detach: bool = typer.Option(False, "--detach"), db: Path | None = DbOption) -> None:
    """Run a session again from the store (after a kill, a restart or an interruption): it goes on from the gate
    it waited at. A failed session is retried, and egg says so."""
    store = _store(db)
    try:
        record = api.get_session(store, session_id)
        if not record.resumable:
            _fail(f"session {session_id} is {record.status}: nothing to resume")
        if api.worker_alive(record):
            _fail(f"session {session_id} already has a live worker (pid {record.worker_pid})")
        if record.status == "failed":
            api.reopen(store, session_id)
            err.print(f"session {session_id} had failed ({record.error}): retrying it from the store", highlight=False)
        if detach:
            err.print(f"worker {api.resume(store, session_id)} resumes session {session_id}", highlight=False)
            return
    except api.ApiError as error:
        _fail(str(error))
    _run_foreground(store, session_id)


@session_app.command("list")
def list_command(db: Path | None = DbOption, as_json: bool = JsonOption) -> None:
    """Every stored session, newest first."""
    store = _store(db)
    views = [api.session_view(store, s.id) for s in api.list_sessions(store)]
    if as_json:
        print(json.dumps([{k: v[k] for k in ("id", "status", "stage", "problem", "backend", "review", "created_at", "outcome", "worker_alive")}
                          for v in (view.to_json() for view in views)], indent=1))
        return
    table = Table("id", "problem", "status", "stage", "review", "backend", "outcome")
    for view in views:
        s = view.session
        status = s.status + ("" if s.finished or view.worker_alive else " (no worker)")
        table.add_row(s.id, s.problem_name, status, s.stage, s.review, s.backend.get("describe", ""), s.outcome.get("headline", ""))
    out.print(table)


@session_app.command("show")
def show(session_id: str = typer.Argument(...), db: Path | None = DbOption, as_json: bool = JsonOption) -> None:
    """A session: status, stage, open gates, decisions."""
    store = _store(db)
    try:
        view = api.session_view(store, session_id)
    except api.ApiError as error:
        _fail(str(error))
    data = view.to_json()
    if as_json:
        print(json.dumps(data, indent=1))
        return
    alive = "" if view.session.finished or view.worker_alive else " (no worker: egg session resume)"
    out.print(f"session {data['id']}: {data['problem']}, {data['status']}{alive}, stage {data['stage'] or '-'}, review {data['review']}, backend {data['backend']}", highlight=False)
    if data["outcome"].get("headline"):
        out.print(data["outcome"]["headline"], highlight=False)
    if data["outcome"].get("versus_compile"):
        out.print(data["outcome"]["versus_compile"], markup=False, highlight=False)
    for gate in data["pending"]:
        out.print(f"  open gate {gate['id']}: {gate['kind']} in {gate['stage']} (egg gate list {data['id']})", highlight=False)
    for d in data["decisions"][-10:]:
        out.print(f"  decision on gate {d['gate_id']}: {d['action']} by {d['who']}" + (f": {d['feedback']}" if d["feedback"] else ""), highlight=False)


@session_app.command("events")
def events_command(session_id: str = typer.Argument(...), after: int = typer.Option(0, "--after", help="Only events after this id."),
                   db: Path | None = DbOption, as_json: bool = JsonOption) -> None:
    """A session's timeline: every step the worker took, in order."""
    store = _store(db)
    try:
        found = api.events(store, session_id, after)
    except api.ApiError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps([{"id": e.id, "at": e.at, "kind": e.kind, "message": e.message, "data": e.data} for e in found], indent=1))
        return
    for e in found:
        out.print(f"{e.at[11:19]} {e.kind:<12} {e.message}", markup=False, highlight=False)


@session_app.command("import")
def import_command(files: list[Path] = typer.Argument(None, help="Recorded sessions (JSON bundles); default: data/recorded/*.json."),
                   db: Path | None = DbOption) -> None:
    """Recorded sessions into the store, to replay them offline (egg session replay ID, or the Learn page)."""
    store = _store(db)
    paths = files or api.recorded_sessions()
    for path in paths:
        try:
            record = api.import_bundle(store, json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, api.ApiError) as error:
            _fail(f"{path}: {error}")
        out.print(f"{record.id}  {record.problem_name}  {record.outcome.get('headline', record.status)}  ({Path(path).name})", highlight=False)


@session_app.command("replay")
def replay_command(session_id: str = typer.Argument(...), db: Path | None = DbOption) -> None:
    """A session gate by gate, as it was decided: what each gate showed, and what was decided there."""
    store = _store(db)
    try:
        found = api.gates(store, session_id)
    except api.ApiError as error:
        _fail(str(error))
    for gate in found:
        decision = f"{gate.decision.action} by {gate.decision.who}" if gate.decision else "open"
        out.print(f"[bold]gate {gate.id}[/] {gate.stage} / {gate.kind}: {api.gate_summary(gate)} -> {decision}", highlight=False)


@session_app.command("cancel")
def cancel_command(session_id: str = typer.Argument(...), db: Path | None = DbOption) -> None:
    """Ask a session's worker to stop (at once when none runs it)."""
    store = _store(db)
    try:
        record = api.cancel(store, session_id)
    except api.ApiError as error:
        _fail(str(error))
    out.print(f"session {session_id}: {'cancelled' if record.status == 'cancelled' else 'cancel requested'}", highlight=False)


@session_app.command("branch")
def branch_command(session_id: str = typer.Argument(...), gate_id: int = typer.Argument(..., help="The gate to branch from."),
                   review: Review | None = typer.Option(None, help="Its review mode (default: the session's; every for an auto one)."),
                   detach: bool = typer.Option(False, "--detach", help="Start a worker for the branch."),
                   db: Path | None = DbOption, as_json: bool = JsonOption) -> None:
    """A new session that shares everything up to a gate, where it waits again for a decision."""
    store = _store(db)
    try:
        record = api.branch(store, session_id, gate_id, review=review.value if review else None)
    except api.ApiError as error:
        _fail(str(error))
    print(json.dumps({"id": record.id, "parent_id": session_id}) if as_json else record.id, flush=True)
    if detach:
        api.start_worker(store, record.id)


@session_app.command("export")
def export_command(session_id: str = typer.Argument(...), out_dir: Path = typer.Option(..., "--out", help="Where to write the files."),
                   db: Path | None = DbOption) -> None:
    """best.py, report.md and evidence.json of a finished session."""
    store = _store(db)
    try:
        written = api.export(store, session_id, out_dir)
    except api.ApiError as error:
        _fail(str(error))
    out.print("wrote " + ", ".join(str(p) for p in written), highlight=False)


@gate_app.command("list")
def gate_list(session_id: str = typer.Argument(...), all_gates: bool = typer.Option(False, "--all", help="Closed gates too."),
              db: Path | None = DbOption, as_json: bool = JsonOption) -> None:
    """A session's open gates (with --all, every gate), each with its kind, stage and payload."""
    store = _store(db)
    try:
        found = api.gates(store, session_id, open_only=not all_gates)
    except api.ApiError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps([api.gate_json(g) for g in found], indent=1))
        return
    numbers = api.gate_numbers(store, session_id)
    for gate in found:
        state = f"{gate.decision.action} by {gate.decision.who}" if gate.decision else "open"
        out.print(f"gate {gate.id} (no. {numbers.get(gate.key, '?')}): {gate.kind} in {gate.stage} ({state}) {gate.summary}", highlight=False)
        for heard in gate.data.heard:
            out.print(f"  answers your {heard.what} at gate no. {numbers.get(heard.gate_key, '?')}: " + heard_line(heard), highlight=False)


def heard_line(heard) -> str:
    """Where a person's words went: into which model calls' prompts, or to the expert's rules."""
    if not heard.calls:
        return "no model prompt (the expert's rules read it; the proposal's rationale says what they made of it)"
    return "in the prompt of " + ", ".join(f"the {agent or 'model'} call {key[:12]}" for agent, key in zip(heard.agents, heard.calls))


@gate_app.command("decide")
def gate_decide(
    session_id: str = typer.Argument(...),
    gate_id: int = typer.Argument(...),
    action: Action = typer.Argument(..., help="approve, edit, reject, skip or stop."),
    file: Path | None = typer.Option(None, "--file", help="The edited plan (JSON), kernel (Python) or stage end (JSON)."),
    feedback: str = typer.Option("", "--feedback", help="Why (a rejection's feedback goes to the agent's next call)."),
    who: str = typer.Option("person", "--who", help="Who decides (kept in the audit trail)."),
    db: Path | None = DbOption,
) -> None:
    """Decide a gate; the waiting worker goes on from it."""
    store = _store(db)
    edit_text = None
    if file is not None:
        try:
            edit_text = read_source(file)
        except ProblemError as error:  # missing, unreadable, not UTF-8
            _fail(str(error))
    try:
        decision = api.decide(store, session_id, gate_id, action.value, edit_text=edit_text, feedback=feedback, who=who)
    except api.ApiError as error:
        _fail(str(error))
    out.print(f"gate {gate_id}: {decision.action} by {decision.who}", highlight=False)
