"""The one way egg starts a process that imports a problem or a candidate outside the judge's own workers: in the
judge's sandbox, under the judge's limits.

The judge's workers fork from a server that has torch loaded (pipeline.judge.sandbox); every other process that
runs user code (the expert's capture of a problem, the profiler's static survey of a candidate) is started here,
as `python -m pipeline.judge.jail`, which enters the same isolation (pipeline.judge.isolation) and then becomes the
module asked for. `tests/test_layout.py` walks the code and fails on a process started anywhere else.

`run(module, args, ...)` waits for the process (its timeout on this process's clock, its whole process group
killed past it) and returns a `Finished`: an error line (None when it exited 0), the tail of its output, and what
isolation it got.
"""

from __future__ import annotations

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
        timeout_s: float, environment: dict[str, str] | None = None, job_limits: limits.Limits | None = None) -> Finished:
    """Run `python -m module args...` in the sandbox with `workdir` as its only writable folder, and wait for it."""
    workdir = Path(workdir).resolve()
    job_limits = dataclasses.replace(job_limits or limits.default_limits(), file_bytes=OUTPUT_LIMIT_BYTES)
    spec = {"plan": plan(workdir, read_only, device, environment).to_json(), "device": device, "module": module,
            "args": list(args), "limits": job_limits.to_json()}
    spec_path = workdir / "jail.json"
    spec_path.write_text(json.dumps(spec))
    log = workdir / "log.txt"
    with log.open("wb") as sink:
        child = subprocess.Popen([sys.executable, "-m", "pipeline.judge.jail", str(spec_path)], cwd=workdir, stdout=sink,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_bootstrap_environment(),
                                 start_new_session=True)
        try:
            code = child.wait(timeout=timeout_s)
            error = None if code == 0 else _exit_story(code)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            error = f"timed out after {timeout_s:.0f} s"
    return Finished(error, _tail(log), _isolation(workdir))


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
