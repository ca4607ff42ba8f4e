"""The `egg` command: parse, call, print."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path


def _since_start() -> float | None:
    """Seconds since this process started (Linux: /proc), so `egg check --json` can say where a check's time went
    before the judge's own phases begin; None where /proc does not say."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return round(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


def _start_judge_early() -> float | None:
    """When this process is `egg check`, start the judge's worker server before the rest of the CLI is imported:
    a repeat check spends most of its seconds waiting for that server's torch and triton imports. The device is
    guessed as `check` guesses it (a wrong guess is corrected there); any other command starts nothing."""
    argv = sys.argv
    if len(argv) < 2 or argv[1] != "check" or Path(argv[0]).name not in ("egg", "cli.py") or {"--help", "-h"} & set(argv):
        return None
    from pipeline.judge import sandbox

    device = next((a.split("=", 1)[1] for a in argv if a.startswith("--device=")), None)
    if "--device" in argv[:-1]:
        device = argv[argv.index("--device") + 1]
    sandbox.start_early_pool(device if device in ("cuda", "cpu") else ("cuda" if sandbox.gpu_device_files() else "cpu"))
    return _since_start()


_SERVER_LAUNCHED_AT = _start_judge_early()

import typer  # noqa: E402  (after the early start)
from rich.console import Console  # noqa: E402

from pipeline.types import EvalOptions  # noqa: E402

try:
    from pipeline.llm.cli import app as llm_app
except ImportError as missing:  # the GPU machine's image lacks pydantic and the SDKs; check and profile work there
    llm_app = typer.Typer(help=f"Unavailable in this environment ({missing}).")

app = typer.Typer(help="egg: faster, verified Triton kernels from PyTorch programs.", no_args_is_help=True, add_completion=False)
app.add_typer(llm_app, name="llm")
try:
    from pipeline.sessions.cli import gate_app, session_app
except ImportError as missing:  # the GPU machine's image lacks sqlite-utils and pydantic unless they are carried
    session_app = gate_app = typer.Typer(help=f"Unavailable in this environment ({missing}).")
app.add_typer(session_app, name="session")
try:
    from pipeline.bench.cli import bench as bench_command
except ImportError as missing:  # as the session commands: the GPU machine's image lacks sqlite-utils and pydantic
    bench_command = None
if bench_command is not None:
    app.command("bench")(bench_command)
app.add_typer(gate_app, name="gate")
err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the terminal width
DEFAULTS = EvalOptions()
_IMPORTED_AT = _since_start()  # this module and its subcommands' modules imported


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class HeadStartMode(str, Enum):  # pipeline.types.HEAD_START_MODES
    fixed = "fixed"
    until_launched = "until_launched"


def resolve_device(device: Device) -> str:
    """`auto` means cuda when a GPU is visible, else cpu, and says so: never a silent switch."""
    if device is not Device.auto:
        if device is Device.cuda:
            import torch

            if not torch.cuda.is_available():
                fail("--device cuda, but no CUDA GPU is visible", "use --device cpu to check correctness through Triton's interpreter")
        return device.value
    import torch

    if torch.cuda.is_available():
        return "cuda"
    err.print("[yellow]no CUDA GPU visible: checking on the CPU through Triton's interpreter (correctness only, no timing)[/]")
    return "cpu"


def fail(message: str, hint: str = "", code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}" + (f"\n[dim]hint: {hint}[/]" if hint else ""))
    raise typer.Exit(code)


@app.command()
def check(
    candidate: Path = typer.Argument(..., help="A file defining class ModelNew."),
    ref: Path = typer.Option(..., "--ref", help="The KernelBench-format problem file it must match."),
    device: Device = typer.Option(Device.auto, help="cuda (timed) or cpu (Triton's interpreter, correctness only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the EvalResult as JSON (top-level `status`)."),
    trials: int = typer.Option(5, min=1, help="Correctness trials with fresh seeds (plus a signed-input trial)."),
    timing_trials: int = typer.Option(100, min=5, help="Timed calls per measurement (GPU)."),
    compile_timeout: float = typer.Option(300.0, help="Seconds for import, construction and the first call."),
    run_timeout: float = typer.Option(600.0, help="Seconds for everything after the first call."),
    cuda_graph: bool = typer.Option(False, help="Also time CUDA-graph replay (GPU)."),
    head_start_mode: HeadStartMode = typer.Option(HeadStartMode(DEFAULTS.head_start_mode), help="What the GPU runs before each timed call, so host launch latency is not device time. until_launched: a spin until the host has launched the call, --head-start-ms at most; fixed: a spin of --head-start-ms (0: none, as do_bench)."),
    head_start_ms: float = typer.Option(DEFAULTS.head_start_ms, min=0.0, help="The head start's cap (until_launched) or length (fixed)."),
    warmup_ms: float = typer.Option(DEFAULTS.warmup_ms, min=0.0, help="Calls back to back before the trials, so they start at the clocks of a loaded GPU."),
) -> None:
    """Judge a candidate strictly against a problem. Exit status 0 only when the verdict is ok."""
    marks = {"server_launched": _SERVER_LAUNCHED_AT, "cli_imported": _IMPORTED_AT}  # seconds since the process started (--json: cli_s)
    from pipeline.judge.sandbox import WorkerPool, gpu_device_files, take_early_pool
    from pipeline.problems.loader import ProblemError, load_candidate, load_problem

    # The judge's worker server imports torch and triton for seconds: it was started before this module's imports
    # (_start_judge_early) or starts now, while this process imports torch too. `auto` guesses from the device
    # files; a wrong guess restarts it for the right device.
    guess = device.value if device is not Device.auto else ("cuda" if gpu_device_files() else "cpu")
    pool = take_early_pool(guess) or WorkerPool(guess)
    try:
        problem, cand = load_problem(ref), load_candidate(candidate)
    except ProblemError as exc:
        pool.close()
        fail(str(exc))
    pool.start_server()
    marks["server_started"] = _since_start()
    resolved = resolve_device(device)
    if resolved != guess:
        pool.close()
        pool = WorkerPool(resolved)
    from pipeline.judge import Judge
    from pipeline.report.verdict import render
    from pipeline.types import to_jsonable

    options = EvalOptions(
        device=resolved,
        correctness_trials=trials,
        timing_trials=timing_trials,
        compile_timeout_s=compile_timeout,
        run_timeout_s=run_timeout,
        cuda_graph=cuda_graph,
        head_start_ms=head_start_ms,
        head_start_mode=head_start_mode.value,
        warmup_ms=warmup_ms,
    )
    if not as_json:
        err.print(f"[dim]judging {cand.path} on {options.device} ...[/]")
    marks["torch_imported"] = _since_start()
    with Judge(options, pool=pool) as judge:
        marks["verdict_started"] = _since_start()
        result = judge.evaluate(problem, cand)
        marks["verdict_done"] = _since_start()
    marks["workers_closed"] = _since_start()
    if as_json:
        sys.stdout.write(json.dumps({**to_jsonable(result), "cli_s": marks}, indent=2) + "\n")
    else:
        render(result, Console())
    code = 0 if result.ok else 1
    if _ENTRY_PROCESS:  # the verdict is out and every worker gone: skip torch's and CUDA's teardown (about a second)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


@app.command()
def profile(
    candidate: Path = typer.Argument(..., help="A file defining class ModelNew."),
    ref: Path = typer.Option(..., "--ref", help="The KernelBench-format problem file it solves."),
    as_json: bool = typer.Option(False, "--json", help="Print the ProfileReport as JSON."),
    static_only: bool = typer.Option(False, "--static-only", help="No GPU run: sm_90 compile facts and the analytic floor."),
    mode: str = typer.Option("auto", help="auto, ncu, torch_profiler or static_only."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Profile again even if this candidate was profiled here."),
) -> None:
    """What limits a candidate's kernels: NCU counters, roofline classification, evidence (static facts without a GPU)."""
    from pipeline.problems.loader import ProblemError
    from pipeline.profiler.profiling import ProfileOptions, ProfilerSetupError, profile_candidate
    from pipeline.report.profile import render
    from pipeline.types import to_jsonable

    options = ProfileOptions(mode="static_only" if static_only else mode, use_cache=not no_cache)
    if not as_json:
        err.print(f"[dim]profiling {candidate} ({options.mode}) ...[/]")
    try:
        report = profile_candidate(candidate, ref, options)
    except ProblemError as exc:
        fail(str(exc))
    except ProfilerSetupError as exc:
        fail(str(exc), exc.hint)
    if as_json:
        sys.stdout.write(json.dumps(to_jsonable(report), indent=2) + "\n")
    else:
        render(report, Console())
    raise typer.Exit(0 if report.overall is not None else 1)


@app.command()
def optimize(
    problem: Path = typer.Argument(..., help="A KernelBench-format problem file."),
    llm: str | None = typer.Option(None, "--llm", help="PROVIDER:MODEL\\[@BASE_URL] (else EGG_LLM or egg.yaml)."),
    script: Path | None = typer.Option(None, "--script", help="A YAML file of scripted replies per agent, instead of a model."),
    config: Path | None = typer.Option(None, "--config", help="YAML config (default: ./egg.yaml)."),
    device: Device = typer.Option(Device.auto, help="cuda (timed) or cpu (correctness only)."),
    out: Path = typer.Option(Path("egg-out"), "--out", help="Where best.py, report.md, evidence.json and the store go."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run kept in --out."),
    seeds: int = typer.Option(3, min=1, max=5, help="Seeds of different paradigms in stage 1."),
    rounds: int = typer.Option(2, min=0, help="Profile/rewrite rounds per hardware sub-stage."),
    debug_rounds: int = typer.Option(2, min=0, help="Repairs per failing candidate."),
    transforms: bool = typer.Option(True, "--transforms/--no-transforms", help="Stage 1: expert transformations of each correct seed."),
    tune_evals: int = typer.Option(6, min=0, help="Configurations judged per tuning search in stage 2 (GPU; 0: no tuning)."),
    profile_mode: str = typer.Option("auto", help="What the Profile Agent is shown: auto, ncu, torch_profiler or static_only."),
    max_llm_calls: int = typer.Option(120, min=1, help="Budget: model calls."),
    max_cost_usd: float | None = typer.Option(None, help="Budget: dollars."),
    max_wall_s: float | None = typer.Option(None, help="Budget: wall-clock seconds."),
) -> None:
    """Optimize one problem: seeds, then parallel mapping, tiling and memory; writes best.py, report.md,
    evidence.json into --out. Exit status 1 when no candidate passed (best.py is then the reference)."""
    from pipeline import api
    from pipeline.api import ModelChoice
    from pipeline.config import ConfigError, load_config
    from pipeline.stages.script import ScriptError
    from pipeline.stages.method import Budget
    from pipeline.problems.loader import ProblemError

    try:
        choice = ModelChoice(script=script) if script else ModelChoice(llm=load_config(config, llm_spec=llm).llm)
        if choice.llm is not None and choice.llm.spec is None:
            err.print("no model configured: using the expert backend")  # announced, never a silent fallback
        from pipeline.profiler.profiling import MODES

        if profile_mode not in MODES:
            fail(f"--profile-mode {profile_mode!r} is not one of {', '.join(MODES)}")
        options = EvalOptions(device=resolve_device(device))
        budget = Budget(seeds=seeds, rounds=rounds, debug_rounds=debug_rounds, transforms=transforms, tune_evals=tune_evals,
                        max_llm_calls=max_llm_calls, max_cost_usd=max_cost_usd, max_wall_s=max_wall_s)
        outcome = api.optimize(problem, out, choice, options, budget, resume=resume, on_event=lambda m: err.print(m, markup=False, highlight=False), profile_mode=profile_mode)
    except (ConfigError, api.ApiError, ScriptError, ProblemError) as exc:
        fail(str(exc))
    from rich.markup import escape

    console = Console()
    console.print(f"[bold]{escape(outcome.headline())}[/]", highlight=False)
    if outcome.versus_compile():
        console.print(f"[bold yellow]{escape(outcome.versus_compile())}[/]", highlight=False)
    console.print(f"wrote {out / 'best.py'}, {out / 'report.md'}, {out / 'evidence.json'}", highlight=False)
    raise typer.Exit(1 if outcome.best_is_reference else 0)


@app.command()
def ui(
    port: int = typer.Option(None, "--port", envvar="EGG_PORT", help="The port (default 8501, or EGG_PORT)."),
    db: Path | None = typer.Option(None, "--db", envvar="EGG_DB", help="The store (default: data/egg.sqlite in a checkout)."),
    address: str = typer.Option("127.0.0.1", "--address", help="Where to listen: localhost only unless you say otherwise."),
    allow_host: list[str] = typer.Option([], "--allow-host", help="A host name the app may be reached by besides localhost (repeatable; also EGG_ALLOWED_HOSTS)."),
) -> None:
    """Serve the web app (Streamlit) on 127.0.0.1: usage statistics off, a minimal toolbar, other host names refused."""
    from pipeline.sessions.app import app_file, serve_command
    from pipeline.sessions.hostcheck import ALLOWED_HOSTS_VARIABLE, is_loopback, parse_hosts

    script = app_file()
    if script is None:
        fail("the web app's files (app.py, pages/) are not installed with this egg", "run it from a checkout: make app")
    allowed = parse_hosts(" ".join([os.environ.get(ALLOWED_HOSTS_VARIABLE, ""), *allow_host]))
    if not is_loopback(address):
        if not allowed:
            fail(f"--address {address} listens beyond this machine: name the host names it may be reached by with --allow-host NAME (or {ALLOWED_HOSTS_VARIABLE})")
        err.print(f"[yellow]warning: --address {address} listens beyond this machine; it answers to localhost and {', '.join(sorted(allowed))} only, with no login: anyone who reaches it can start sessions[/]")
    os.environ[ALLOWED_HOSTS_VARIABLE] = ",".join(sorted(allowed))
    if db is not None:
        os.environ["EGG_DB"] = str(db.resolve())
    command = serve_command(script, port or 8501, address)
    err.print(f"egg's web app on http://{address}:{port or 8501} (database {os.environ.get('EGG_DB') or 'data/egg.sqlite'})", highlight=False)
    os.execv(command[0], command)


_ENTRY_PROCESS = False  # True when this process is the `egg` command itself (not a test calling the app)


def main() -> None:
    global _ENTRY_PROCESS
    from pipeline.judge.isolation import make_undumpable

    make_undumpable()  # this process may hold API keys: no other process of this user reads its /proc files
    _ENTRY_PROCESS = True
    app()


if __name__ == "__main__":
    main()
