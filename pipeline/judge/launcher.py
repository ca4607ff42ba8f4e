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

import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pipeline
from pipeline.judge import isolation, limits

OUTPUT_LIMIT_BYTES = 64 << 20  # the largest file a launched process may write, its log included (the head is kept)
READ_LIMIT_BYTES = 64 << 20  # the most the parent reads of any file a launched process wrote


class LaunchError(RuntimeError):
    """The job folder handed to the launcher is not a fresh, real folder."""


@dataclass(frozen=True)
class Finished:
    """How a launched process ended: `error` is None when it exited 0; `isolation` what it got (missing parts named)."""

    error: str | None
    log_tail: str = ""
    isolation: dict = field(default_factory=dict)


@dataclass
class Started:
    """A long-lived launched process (`start`): talk over `process.stdin`/`process.stdout`; its stderr goes to
    `log`, in a folder of the launcher's that the job cannot see. `close()` kills its group and removes that folder."""

    process: subprocess.Popen
    log: Path
    control: Path

    def log_tail(self, limit: int = 3000) -> str:
        return _tail(self.log, limit)

    def isolation(self) -> dict:
        return _isolation(self.control)

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        shutil.rmtree(self.control, ignore_errors=True)


def plan(workdir: Path, read_only: Sequence[str], device: str, environment: dict[str, str] | None = None) -> isolation.Plan:
    """What a launched process may see: Python, egg's package, `read_only`; write: its folder alone."""
    from pipeline.judge.sandbox import clean_environment

    home = workdir / "home"
    caches = {name: str(workdir / "cache" / sub) for name, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                                                                  ("CUDA_CACHE_PATH", "nv"), ("XDG_CACHE_HOME", "xdg"))}
    for folder in (home, workdir / "cache", *map(Path, caches.values())):
        os.mkdir(folder)  # the folder is fresh (checked): nothing of a job's is there to follow
    env = isolation.job_environment({**clean_environment(device), **(environment or {})}, home=str(home), caches=caches)
    shown = (*isolation.python_paths(exclude=(str(pipeline.ROOT),)), str(pipeline.ROOT / "pipeline"), *map(os.path.abspath, read_only))
    hidden = (str(pipeline.ROOT), str(Path.home()), os.getcwd(), str(Path.home() / ".config"))
    return isolation.Plan(str(workdir), shown, (), env, not isolation.disabled(), tuple(h for h in hidden if h != "/"))


def run(module: str, args: Sequence[str], *, workdir: str | os.PathLike, read_only: Sequence[str] = (), device: str = "cpu",
        timeout_s: float, environment: dict[str, str] | None = None, job_limits: limits.Limits | None = None,
        argv: Sequence[str] | None = None, tail_bytes: int = 2000) -> Finished:
    """Run `python -m module args...` (or the program `argv`, which starts the user code itself: NCU) in the
    sandbox with `workdir` as its only writable folder, and wait for it. `workdir` must be a fresh folder, empty but
    for what the caller put there for the job: a folder a job wrote before is the job's, and nothing of egg's
    is created or followed there. The spec, the log and the isolation report live in a folder of the
    launcher's, outside the job's view, and are gone when this returns."""
    workdir = _fresh(workdir)
    control = Path(tempfile.mkdtemp(prefix="egg-launch-"))
    try:
        spec_path = _write_spec(control, workdir, module, args, read_only, device, environment, job_limits, argv)
        log = control / "log.txt"
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
            try:
                os.killpg(child.pid, signal.SIGKILL)  # nothing of the job's outlives it
            except (ProcessLookupError, PermissionError):
                pass
        return Finished(error, _tail(log, tail_bytes), _isolation(control))
    finally:
        shutil.rmtree(control, ignore_errors=True)


def start(module: str, args: Sequence[str] = (), *, workdir: str | os.PathLike, read_only: Sequence[str] = (), device: str = "cpu",
          environment: dict[str, str] | None = None, job_limits: limits.Limits | None = None) -> Started:
    """Start `python -m module args...` in the sandbox, talking over its stdin and stdout (pipes); `workdir` as
    for `run` (fresh: a restarted worker gets a new one). The caller owns the process (`Started.close`). A
    long-lived worker (the tuning engine's) is started here."""
    workdir = _fresh(workdir)
    control = Path(tempfile.mkdtemp(prefix="egg-launch-"))
    spec_path = _write_spec(control, workdir, module, args, read_only, device, environment, job_limits, None)
    log = control / "log.txt"
    with log.open("ab") as errors:
        process = subprocess.Popen([sys.executable, "-m", "pipeline.judge.jail", str(spec_path)], cwd=workdir, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=errors, env=_bootstrap_environment(), start_new_session=True)
    return Started(process, log, control)


def read_job_file(path: str | os.PathLike, limit: int = READ_LIMIT_BYTES) -> bytes | None:
    """A file a launched job wrote, as the parent may read it: a regular file (not a link, a FIFO or a device: the
    open never follows or blocks), at most `limit` bytes; None when it is anything else or over the limit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    finally:
        os.close(fd)


def read_job_json(path: str | os.PathLike, limit: int = READ_LIMIT_BYTES) -> Any:
    """`read_job_file` as JSON (`job_json`): None when it is not a regular file or does not parse."""
    data = read_job_file(path, limit)
    if data is None:
        return None
    try:
        return job_json(data)
    except ValueError:
        return None


# The most values (containers and separated items) the parent parses from one job's JSON: a file within the read
# limit made of empty objects or small numbers would otherwise cost it 20-30 times its size in memory.
MAX_JSON_VALUES = 4_000_000


def job_json(data: str | bytes) -> Any:
    """JSON that a job wrote (a file, a reply line), parsed as strictly as the parent needs: no NaN or Infinity,
    no more than MAX_JSON_VALUES values (counted before parsing), and nesting too deep for the parser is a
    ValueError like any other malformed text."""
    marks = (",", "{", "[") if isinstance(data, str) else (b",", b"{", b"[")
    if sum(data.count(mark) for mark in marks) > MAX_JSON_VALUES:
        raise ValueError(f"more than {MAX_JSON_VALUES:,} values")
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _fresh(workdir: str | os.PathLike) -> Path:
    """The job's folder, checked: a real folder (no link anywhere on its path), with no home or cache in it yet."""
    path = Path(workdir).resolve()
    if str(path) != os.path.abspath(workdir) or not path.is_dir() or path.is_symlink():
        raise LaunchError(f"the job folder {workdir} is not a real folder")
    if any(os.path.lexists(path / name) for name in ("home", "cache", ".root")):
        raise LaunchError(f"the job folder {workdir} was used by a job before: each launch needs a fresh one")
    return path


def _write_spec(control: Path, workdir: Path, module: str, args: Sequence[str], read_only: Sequence[str], device: str,
                environment: dict[str, str] | None, job_limits: limits.Limits | None, argv: Sequence[str] | None) -> Path:
    job_limits = dataclasses.replace(job_limits or limits.default_limits(), file_bytes=OUTPUT_LIMIT_BYTES)
    spec = {"plan": plan(workdir, read_only, device, environment).to_json(), "device": device, "module": module,
            "args": list(args), "argv": list(argv) if argv else None, "limits": job_limits.to_json(),
            "report_path": str(control / "isolation.json")}
    path = control / "jail.json"
    path.write_text(json.dumps(spec))
    return path


def _bootstrap_environment() -> dict[str, str]:
    """What the jail itself needs before it replaces the environment with the plan's: egg's package first."""
    from pipeline.judge.sandbox import clean_environment

    return clean_environment("cpu")


def _exit_story(code: int) -> str:
    if code < 0:
        return f"the process died from {signal.Signals(-code).name}"
    return f"the process exited with {code}"


def _tail(path: Path, limit: int = 2000) -> str:
    """The end of a log of the launcher's own (the job cannot replace it: it is outside the job's view)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - limit))
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _isolation(control: Path) -> dict:
    data = read_job_json(control / "isolation.json", 1 << 20)
    return data if isinstance(data, dict) else {}
