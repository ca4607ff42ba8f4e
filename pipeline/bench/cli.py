"""`egg bench DIR...` and `egg bench report OUT`: a suite through the method, and its report rebuilt from the store."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from pipeline import api
from pipeline.bench.problems import SuiteError, discover, parse_levels
from pipeline.store import StoreError

err = Console(stderr=True, soft_wrap=True)


class Executor(str, Enum):
    local = "local"
    ray = "ray"


class BenchDevice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def _fail(message: str, hint: str = "") -> None:
    err.print(f"[bold red]error:[/] {message}" + (f"\n[dim]hint: {hint}[/]" if hint else ""), highlight=False)
    raise typer.Exit(2)


def gpu_slots(text: str) -> list[str]:
    """`all` -> every visible GPU (CUDA_VISIBLE_DEVICES' list when it is set); `0,1` -> those."""
    import torch

    count = torch.cuda.device_count()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    names = visible[:count] if visible else [str(n) for n in range(count)]
    if text == "all":
        if not names:
            _fail("--device cuda, but no CUDA GPU is visible", "use --device cpu (correctness only, through Triton's interpreter)")
        return names
    wanted = [v.strip() for v in text.split(",") if v.strip()]
    if not wanted:
        _fail(f"--gpus takes all or GPU numbers separated by commas (0,1), not {text!r}")
    if not visible:
        missing = [w for w in wanted if not w.isdigit() or int(w) >= count]
        if missing:
            _fail(f"--gpus {text}: this machine has {count} GPU(s) (0..{count - 1})" if count else f"--gpus {text}: no CUDA GPU is visible")
    return wanted


def _device(device: BenchDevice) -> str:
    if device is not BenchDevice.auto:
        return device.value
    import torch

    if torch.cuda.is_available():
        return "cuda"
    err.print("[yellow]no CUDA GPU visible: the suite runs on the CPU through Triton's interpreter (correctness only, no timing)[/]")
    return "cpu"


def bench(
    dirs: list[Path] = typer.Argument(..., help="Folders of KernelBench-format problems (KernelBench's own layout works: levels from folders level1..level4), or problem files. `egg bench report OUT` rebuilds OUT's report from the store."),
    llm: str | None = typer.Option(None, "--llm", help="PROVIDER:MODEL\\[@BASE_URL] (else EGG_LLM or egg.yaml; with none, the expert backend)."),
    expert: bool = typer.Option(False, "--expert", help="egg's expert backend (rules, templates and search; no model)."),
    config: Path | None = typer.Option(None, "--config", help="YAML config: the model, and per-problem budgets under bench: (default ./egg.yaml)."),
    device: BenchDevice = typer.Option(BenchDevice.auto, help="cuda (timed) or cpu (correctness only); auto picks."),
    gpus: str = typer.Option("all", "--gpus", help="GPUs to use, one worker each: all, or numbers such as 0,1."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="On the CPU: problems run at once."),
    executor: Executor = typer.Option(Executor.local, help="local (a worker per GPU of this machine) or ray (a Ray task per problem, one GPU each)."),
    address: str | None = typer.Option(None, "--address", help="Ray: the cluster to join (default: a local Ray started for this run)."),
    out: Path = typer.Option(Path("egg-bench"), "--out", help="Where bench.json, results.jsonl, results.csv and report.md go."),
    resume: bool = typer.Option(False, "--resume", help="Go on with the run kept in --out: finished problems are kept."),
    only: list[str] = typer.Option([], "--only", help="Problems whose name contains this (or matches it, with * ? [); repeatable."),
    level: str | None = typer.Option(None, "--level", help="Levels to run, e.g. 1,2 (default: all)."),
    seeds: int = typer.Option(2, min=1, max=5, help="Seeds of different paradigms in stage 1."),
    rounds: int = typer.Option(1, min=0, help="Profile/rewrite rounds per hardware sub-stage."),
    debug_rounds: int = typer.Option(2, min=0, help="Repairs per failing candidate."),
    tune_evals: int = typer.Option(6, min=0, help="Configurations judged per tuning search (GPU)."),
    max_wall_s: float | None = typer.Option(None, help="Per problem: wall seconds for its session, re-verification included (else bench.max_wall_s)."),
    max_llm_calls: int | None = typer.Option(None, min=1, help="Per problem: model calls (else bench.max_llm_calls, else 120)."),
    max_cost_usd: float | None = typer.Option(None, help="Per problem: dollars (else bench.max_cost_usd)."),
    timeout_s: float | None = typer.Option(None, help="Per problem: a worker still running after this many seconds is killed and recorded as a hang (default: twice --max-wall-s plus 300, or an hour)."),
    max_autotune: bool = typer.Option(False, "--max-autotune", help="Also time torch.compile(mode='max-autotune') as a baseline."),
    db: Path | None = typer.Option(None, "--db", envvar=api.DB_VARIABLE, help="The store (default: data/egg.sqlite in a checkout)."),
) -> None:
    """Run a suite: a session in review mode auto for every problem found, one worker per GPU (or Ray tasks), with
    a progress bar per GPU. Every session lands in the store (the app's Bench page shows the run); OUT holds
    results.jsonl, results.csv and report.md (fast_p, geomeans per level, per-stage gains, cost), rewritten as each
    problem ends. Ctrl-C stops cleanly; --resume goes on. Exit status 0 when every problem ran, 1 when stopped."""
    if dirs and str(dirs[0]) == "report":
        if len(dirs) != 2:
            _fail("egg bench report OUT: one folder, the --out of a bench run")
        report_command(dirs[1], db)
        return
    from pipeline.bench.execute import BenchSettings
    from pipeline.bench.suite import Suite, open_run, read_manifest
    from pipeline.config import ConfigError, load_config
    from pipeline.sessions.cli import _backend
    from pipeline.stages.method import Budget
    from pipeline.types import EvalOptions

    try:
        skipped: list[Path] = []
        problems = discover(dirs, only or None, parse_levels(level), skipped)
        for path in skipped:
            err.print(f"[yellow]skipped {os.fsencode(path)!r}: its name is not UTF-8 (rename it to run it)[/]", highlight=False)
        settings_file = load_config(config).bench
    except (SuiteError, ConfigError) as error:
        _fail(str(error))
    try:
        manifest = read_manifest(out) if resume else None
    except SuiteError as error:
        _fail(str(error))
    store = _store(db or (Path(manifest["db"]) if manifest and manifest.get("db") else None))
    if manifest is not None and store.bench_run(manifest.get("run_id", "")) is not None:
        settings = BenchSettings.from_json(store.bench_run(manifest["run_id"]).args["settings"])  # the rest runs as the run began
        err.print(f"resuming bench run {manifest['run_id']} as it began: device {settings.device}, backend {settings.backend.describe()}", highlight=False)
    else:
        resolved = _device(device)
        spec = _backend(llm, None, False, expert, config)
        budget = Budget(seeds=seeds, rounds=rounds, debug_rounds=debug_rounds, tune_evals=tune_evals,
                        max_llm_calls=max_llm_calls or settings_file.max_llm_calls or 120,
                        max_cost_usd=max_cost_usd if max_cost_usd is not None else settings_file.max_cost_usd,
                        max_wall_s=max_wall_s or settings_file.max_wall_s)
        baselines = ("eager", "compile", "compile_max_autotune") if max_autotune else ("eager", "compile")
        settings = BenchSettings(spec, resolved, budget, EvalOptions(device=resolved, baselines=baselines), timeout_s or settings_file.timeout_s)
    if executor is Executor.ray:
        slots = ["ray"]
    elif settings.device == "cuda":
        slots = gpu_slots(gpus)
    else:
        slots = [f"cpu{n}" for n in range(jobs)]
    args = {"device": settings.device, "backend": settings.backend.describe(), "executor": executor.value, "address": address, "slots": slots,
            "only": only, "level": level, "argv": sys.argv[1:]}
    try:
        run = open_run(store, out, dirs, problems, settings, args, resume)
    except SuiteError as error:
        _fail(str(error))
    store.update_bench_run(run.id, args={**run.args, "executor": executor.value, "slots": slots})
    chosen = {p.name for p in problems} if resume and (only or level) else None  # a resumed run keeps its list; this call runs these
    suite = Suite(store, store.bench_run(run.id), out, settings, chosen=chosen)
    pending = suite.pending()
    err.print(f"bench run {run.id}: {len(problems)} problem(s), {len(pending)} to run, on {', '.join(slots)} "
              f"({settings.device}, backend {settings.backend.describe()}); store {store.path}; results in {out}", highlight=False)
    finished = _run_with_progress(suite, slots, executor.value, address, len(pending))
    written = suite.write()
    Console().print(f"[bold]{suite.summary()}[/]\nwrote " + ", ".join(str(p) for p in written), highlight=False)
    if not finished:
        err.print(f"stopped: everything finished is kept; go on with: egg bench {' '.join(str(d) for d in dirs)} --out {out} --resume", highlight=False)
    raise typer.Exit(0 if finished else 1)


def _run_with_progress(suite, slots: list[str], executor: str, address: str | None, total: int) -> bool:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, refresh_per_second=4) as progress:
        overall = progress.add_task("suite", total=total)
        lanes = {slot: progress.add_task(f"{slot}: waiting", total=None) for slot in slots}

        def on_item(item, summary: str) -> None:
            if item.status in ("running", "pending"):
                return
            progress.advance(overall)
            progress.update(overall, description=summary)
            row = item.row or {}
            speed = f", {row['speedup_eager']:.3f}x vs eager" if row.get("speedup_eager") else ""
            progress.console.print(f"{item.problem}: {item.status}{', correct' if row.get('correct') else ''}{speed} ({item.wall_s or 0:.0f} s)"
                                   + (f" - {item.story[:200]}" if item.status != "done" and item.story else ""), markup=False, highlight=False)

        def on_slot(slot: str, problem: str) -> None:
            if slot in lanes:
                progress.update(lanes[slot], description=f"{slot}: {problem or 'idle'}")

        suite.on_item = on_item
        try:
            return suite.execute(slots, executor, address, on_slot)
        except RuntimeError as error:  # Ray missing
            _fail(str(error))
        except StoreError as error:
            _fail(str(error))


def _store(db: Path | None):
    try:
        return api.open_store(db)
    except StoreError as error:
        _fail(str(error))
    except Exception as error:
        _fail(f"cannot open the store {db or api.default_db_path()}: {error}")


def report_command(out: Path, db: Path | None) -> None:
    """OUT's results.jsonl, results.csv and report.md rebuilt from the store's sessions."""
    from pipeline.bench.results import rows, write_outputs
    from pipeline.bench.suite import read_manifest

    try:
        manifest = read_manifest(out)
    except SuiteError as error:
        _fail(str(error))
    if manifest is None:
        _fail(f"{out}: no bench run here (no bench.json)")
    store = _store(db or Path(manifest.get("db", "")))
    run = store.bench_run(manifest.get("run_id", ""))
    if run is None:
        _fail(f"{out}: its run {manifest.get('run_id')} is not in the store {store.path}")
    written = write_outputs(out, run, rows(store, run.id, fresh=True))
    Console().print("wrote " + ", ".join(str(p) for p in written), highlight=False)
