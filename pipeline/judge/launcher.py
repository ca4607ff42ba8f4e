"""The one way egg starts a process that imports a problem or a candidate outside the judge's own workers: in the
judge's sandbox, under the judge's limits.

The judge's workers fork from a server that has torch loaded (pipeline.judge.sandbox); every other process that
runs user code (the expert's capture of a problem, the profiler's survey, driver and NCU, the tuning engine's
measuring worker and compile workers) is started here,
as `python -m pipeline.judge.jail`, which enters the same isolation (pipeline.judge.isolation) and then becomes the
module asked for. `tests/test_layout.py` walks the code and fails on a process started anywhere else.

`run(module, args, ...)` waits for the process (its timeout on this process's clock, its whole process group
killed past it) and returns a `Finished`: an error line (None when it exited 0), the tail of its output, and what
isolation it got; `run(..., argv=[program, ...])` runs a program instead (NCU, whose target is the profiler's
driver: both inside). `start(module, ...)` starts a long-lived worker that talks over pipes (the tuning engine's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pipeline
from pipeline.judge import isolation, limits

Process = subprocess.Popen  # what `start` returns
OUTPUT_LIMIT_BYTES = 64 << 20  # the largest file a launched process may write, its log included (the head is kept)


@dataclass(frozen=True)
class Finished:
    """How a launched process ended: `error` is None when it exited 0; `isolation` what it got (missing parts named)."""

    error: str | None
    log_tail: str = ""
    isolation: dict = field(default_factory=dict)


def plan(workdir: Path, read_only: Sequence[str], device: str, environment: dict[str, str] | None = None) -> isolation.Plan:
    """What a launched process may see: Python, egg's package, `read_only`; write: its folder alone."""
    from pipeline.judge.sandbox import clean_environment

    home = workdir / "home"
    caches = {name: str(workdir / "cache" / sub) for name, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                                                                  ("CUDA_CACHE_PATH", "nv"), ("XDG_CACHE_HOME", "xdg"))}
    for folder in (home, *map(Path, caches.values())):
        folder.mkdir(parents=True, exist_ok=True)
    env = isolation.job_environment({**clean_environment(device), **(environment or {})}, home=str(home), caches=caches)
    shown = (*isolation.python_paths(exclude=(str(pipeline.ROOT),)), str(pipeline.ROOT / "pipeline"), *map(os.path.abspath, read_only))
    hidden = (str(pipeline.ROOT), str(Path.home()), os.getcwd(), str(Path.home() / ".config"))
    return isolation.Plan(str(workdir), shown, (), env, not isolation.disabled(), tuple(h for h in hidden if h != "/"))


def run(module: str, args: Sequence[str], *, workdir: str | os.PathLike, read_only: Sequence[str] = (), device: str = "cpu",
        timeout_s: float, environment: dict[str, str] | None = None, job_limits: limits.Limits | None = None,
        argv: Sequence[str] | None = None, log_name: str = "log.txt", stderr_name: str | None = None) -> Finished:
    """Run `python -m module args...` (or the program `argv`, which starts the user code itself: NCU) in the
    sandbox with `workdir` as its only writable folder, and wait for it. Its output goes to `log_name` in the
    folder (stderr to `stderr_name` when given, else with it)."""
    workdir = Path(workdir).resolve()
    spec_path = _write_spec(workdir, module, args, read_only, device, environment, job_limits, argv, log_name)
    log = workdir / log_name
    with log.open("wb") as sink, _sink(workdir, stderr_name) as errors:
        child = subprocess.Popen([sys.executable, "-m", "pipeline.judge.jail", str(spec_path)], cwd=workdir, stdout=sink,
                                 stderr=errors if errors is not None else subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=_bootstrap_environment(), start_new_session=True)
        try:
            code = child.wait(timeout=timeout_s)
            error = None if code == 0 else _exit_story(code)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            error = f"timed out after {timeout_s:.0f} s"
    return Finished(error, _tail(log), _isolation(workdir))


def start(module: str, args: Sequence[str] = (), *, workdir: str | os.PathLike, read_only: Sequence[str] = (), device: str = "cpu",
          environment: dict[str, str] | None = None, job_limits: limits.Limits | None = None, log_name: str = "log.txt") -> Process:
    """Start `python -m module args...` in the sandbox, talking over its stdin and stdout (pipes), its stderr to
    `log_name` in `workdir`; the caller owns the process (its own group: kill it with `os.killpg`). A long-lived
    worker (the tuning engine's) is started here."""
    workdir = Path(workdir).resolve()
    spec_path = _write_spec(workdir, module, args, read_only, device, environment, job_limits, None, log_name)
    with (workdir / log_name).open("ab") as errors:
        return subprocess.Popen([sys.executable, "-m", "pipeline.judge.jail", str(spec_path)], cwd=workdir, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, env=_bootstrap_environment(), start_new_session=True)


def _write_spec(workdir: Path, module: str, args: Sequence[str], read_only: Sequence[str], device: str, environment: dict[str, str] | None,
                job_limits: limits.Limits | None, argv: Sequence[str] | None, log_name: str) -> Path:
    job_limits = dataclasses.replace(job_limits or limits.default_limits(), file_bytes=OUTPUT_LIMIT_BYTES)
    spec = {"plan": plan(workdir, read_only, device, environment).to_json(), "device": device, "module": module,
            "args": list(args), "argv": list(argv) if argv else None, "limits": job_limits.to_json()}
    path = workdir / f"jail-{Path(log_name).stem}.json"
    path.write_text(json.dumps(spec))
    return path


@contextlib.contextmanager
def _sink(workdir: Path, name: str | None):
    if name is None:
        yield None
        return
    with (workdir / name).open("wb") as f:
        yield f


def _bootstrap_environment() -> dict[str, str]:
    """What the jail itself needs before it replaces the environment with the plan's: egg's package first."""
    from pipeline.judge.sandbox import clean_environment

    return clean_environment("cpu")


def _exit_story(code: int) -> str:
    if code < 0:
        return f"the process died from {signal.Signals(-code).name}"
    return f"the process exited with {code}"


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _isolation(workdir: Path) -> dict:
    try:
        return json.loads((workdir / "isolation.json").read_text())
    except (OSError, ValueError):
        return {}
