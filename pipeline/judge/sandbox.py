"""Running jobs in sandboxed worker processes: a fork server per device, isolation, timeouts, crashes, the channel.

`WorkerPool.start()` sends a job to the fork server and returns a `Job` at once: the judge can prepare the
reference while a candidate's process starts, send the candidate its plan over the job's channel when it is ready,
and collect the GPU memory the job hands over. `Job.wait()` gives the `JobOutcome`. Each job is isolated as
pipeline.judge.isolation describes; what it got comes back in its result.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pipeline
from pipeline.judge import channel, isolation

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
COMPILE_PHASES = ("", "isolation", "cuda_init", "setup", "import", "construct", "first_call")
WAIT_PHASES = ("wait_plan", "wait_go")  # waiting for the judge (its plan; the device to itself): no timeout runs
LOG_TAIL_CHARS = 4000
SHM_MIN_FREE_BYTES = 32 << 30


class InfraError(RuntimeError):
    """The sandbox itself failed (not the candidate): the fork server died or could not start."""


def clean_environment(device: str) -> dict[str, str]:
    """The parent's environment without secrets, plus what the worker needs."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    # This repository's `pipeline` first, whatever else is installed (pipeline/__init__.py checks it in the child).
    root = str(pipeline.ROOT)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["EGG_PIPELINE_ROOT"] = root
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def gpu_device_files() -> bool:
    """Whether this machine shows an NVIDIA GPU (without importing torch): its device files, and CUDA_VISIBLE_DEVICES
    not hiding every GPU. A guess for starting the worker server early; torch has the last word."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return any(name.startswith("nvidia") and name[6:].isdigit() for name in _listdir("/dev"))


_early_pool: WorkerPool | None = None


def start_early_pool(device: str) -> None:
    """Start a worker server for `device` now, for a caller that will ask for it later (`take_early_pool`): a
    process whose first work is a verdict starts the server's seconds of imports before its own."""
    global _early_pool
    if _early_pool is None:
        _early_pool = WorkerPool(device)
        _early_pool.start_server()


def take_early_pool(device: str) -> WorkerPool | None:
    """The pool `start_early_pool` started, if it was for `device` (one for another device is closed)."""
    global _early_pool
    pool, _early_pool = _early_pool, None
    if pool is not None and pool.device != device:
        pool.close()
        return None
    return pool


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def default_cache_root() -> Path:
    """`$EGG_CACHE`, else `~/.cache/egg` (the profiler's and the tuning engine's caches live there too)."""
    return Path(os.environ.get("EGG_CACHE") or "~/.cache/egg").expanduser()


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: its result (if it wrote one), exit code, timeout phase, log tail, and the GPU memory it
    handed over (`regions`: id -> (descriptor, size); the receiver opens or closes them)."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: str | None  # "compile" or "run" when a timeout killed it
    phase: str
    log_tail: str
    workdir: Path
    duration_s: float
    regions: dict[int, tuple[int, int]] = field(default_factory=dict)

    def close_regions(self) -> None:
        for fd, _ in self.regions.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.regions.clear()


class Job:
    """One running job: its timeouts are watched and its channel read on two threads of this process."""

    def __init__(self, pool: WorkerPool, workdir: Path, compile_timeout_s: float, run_timeout_s: float) -> None:
        self.pool, self.workdir = pool, workdir
        self.job_id = workdir.name
        self.compile_timeout_s, self.run_timeout_s = compile_timeout_s, run_timeout_s
        self.events: queue.Queue = queue.Queue()
        self.listener = channel.Listener(workdir)
        self.connection: channel.Connection | None = None
        self.connected = threading.Event()
        self.exited = threading.Event()
        self.regions: dict[int, tuple[int, int]] = {}
        self.started = time.monotonic()
        self._exit: tuple[int | None, str | None] = (None, None)
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._watch_guarded, daemon=True), threading.Thread(target=self._read_channel, daemon=True)]

    def _begin(self) -> None:
        for thread in self._threads:
            thread.start()

    # the channel ---------------------------------------------------------------------------------------------------

    def send(self, message: dict) -> bool:
        """Send the job a message once it has connected; False if it ended (or never connected) first."""
        while not self.connected.wait(0.05):
            if self.exited.is_set():
                return False
        try:
            self.connection.send(message)
            return True
        except channel.ChannelClosed:
            return False

    def _read_channel(self) -> None:
        while self.connection is None:
            ended = self.exited.is_set()  # a job that connected and ended quickly still waits in the backlog
            try:
                self.connection = self.listener.accept(timeout_s=0.0 if ended else 0.05)
            except (TimeoutError, OSError):
                if ended:
                    break
        self.listener.close()
        if self.connection is None:
            return
        self.connected.set()
        while True:
            try:
                message, fds = self.connection.receive()
            except (channel.ChannelClosed, TimeoutError):
                break
            self._take(message, fds)
        self.connection.close()

    def _take(self, message: dict, fds: list[int]) -> None:
        region = message.get("id")
        if message.get("type") == "region" and len(fds) == 1 and isinstance(region, int) and isinstance(message.get("size"), int):
            old = self.regions.pop(region, None)
            if old is not None:
                os.close(old[0])
            self.regions[region] = (fds[0], message["size"])
            return
        for fd in fds:  # anything else is not ours to keep
            os.close(fd)

    # timeouts -----------------------------------------------------------------------------------------------------

    def _watch_guarded(self) -> None:
        try:
            self._exit = self._watch()
        except BaseException as exc:  # an InfraError is raised to the caller of wait()
            self._error = exc
        finally:
            self.exited.set()

    def _watch(self) -> tuple[int | None, str | None]:
        pid, run_started, waited, last = None, None, 0.0, time.monotonic()
        while True:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                event = None
            if event is not None:
                if event["event"] == "started":
                    pid = event["pid"]
                elif event["event"] == "exited":
                    return event["returncode"], None
                elif event["event"] == "server_died":
                    raise InfraError("the worker server died")
            now = time.monotonic()
            phase = _read_phase(self.workdir)
            if phase in WAIT_PHASES:
                waited += now - last
            last = now
            in_compile = run_started is None and (phase in COMPILE_PHASES or phase in WAIT_PHASES)
            if not in_compile and run_started is None:
                run_started, waited = now, 0.0
            overdue = (now - self.started - waited > self.compile_timeout_s) if in_compile else (now - run_started - waited > self.run_timeout_s)
            if overdue and pid is not None:
                _kill_group(pid)
                self._wait_exit()
                return None, "compile" if in_compile else "run"

    def _wait_exit(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.events.get(timeout=0.1)["event"] in ("exited", "server_died"):
                    return
            except queue.Empty:
                continue

    # the end ------------------------------------------------------------------------------------------------------

    def kill(self) -> None:
        """End the job now (its whole process group); wait() then reports it."""
        self.pool.kill(self.job_id)

    def wait(self) -> JobOutcome:
        for thread in self._threads:
            thread.join()
        self.pool._forget(self.job_id)
        if self._error is not None:
            for fd, _ in self.regions.values():
                os.close(fd)
            raise self._error if isinstance(self._error, InfraError) else InfraError(str(self._error))
        returncode, timed_out = self._exit
        result_path = self.workdir / "result.json"
        result = None
        if result_path.exists() and returncode == 0:
            try:
                result = json.loads(result_path.read_text())
            except ValueError:
                result = None
        return JobOutcome(result, returncode, timed_out, _read_phase(self.workdir), _tail(self.workdir / "log.txt"), self.workdir,
                          time.monotonic() - self.started, dict(self.regions))


class WorkerPool:
    """One fork server for a device; `start()` runs one job in a fresh, isolated child of it. Thread-safe.

    `isolate=False` runs jobs unisolated (tests that show what a fixture would see without the sandbox; and
    EGG_ISOLATION=off does the same): the verdict's environment says so."""

    def __init__(self, device: str, root: str | os.PathLike | None = None, *, cache_root: str | os.PathLike | None = None,
                 isolate: bool = True) -> None:
        self.device = device
        self.isolate = isolate
        self._root = Path(tempfile.mkdtemp(prefix="egg-jobs-", dir=root or _scratch_root()))
        os.chmod(self._root, 0o711)  # a job running as another uid reaches its own folder, lists none
        self.cache_root = Path(cache_root) if cache_root else default_cache_root()
        self._lock = threading.Lock()
        self._server: subprocess.Popen | None = None
        self._ready = False
        self._jobs: dict[str, Job] = {}
        self._pids: dict[str, int] = {}
        self._ids = itertools.count(1)
        self.python_paths: list[str] = []

    # server life ---------------------------------------------------------------------------------------------------

    def start_server(self) -> None:
        """Start the fork server without waiting for it (its imports take seconds: overlap them with yours)."""
        with self._lock:
            if self._server is None or self._server.poll() is not None:
                self._ready = False
                self._server = subprocess.Popen(
                    [sys.executable, "-m", "pipeline.judge.forkserver"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=open(self._root / "forkserver.log", "ab"),
                    env=clean_environment(self.device),
                    cwd=self._root,
                    start_new_session=True,
                )

    def wait_ready(self) -> None:
        """Start the fork server if needed and wait until it serves jobs."""
        self._ensure_server()

    def _ensure_server(self) -> subprocess.Popen:
        self.start_server()
        with self._lock:
            if self._ready:
                return self._server
            ready = self._server.stdout.readline()
            if not ready:
                raise InfraError(f"the worker server did not start; see {self._root / 'forkserver.log'}")
            hello = json.loads(ready)
            if hello.get("pipeline") != str(pipeline.ROOT):
                raise InfraError(f"the worker server loaded egg's engine from {hello.get('pipeline')}, not from {pipeline.ROOT}")
            self.python_paths = list(hello.get("python_paths", []))
            self._ready = True
            threading.Thread(target=self._read_events, args=(self._server,), daemon=True).start()
            return self._server

    def _read_events(self, server: subprocess.Popen) -> None:
        for line in server.stdout:
            event = json.loads(line)
            job = self._jobs.get(event.get("job_id"))
            if job is not None:
                if event.get("event") == "started":
                    self._pids[job.job_id] = event["pid"]
                job.events.put(event)
        for job in list(self._jobs.values()):
            job.events.put({"event": "server_died"})

    def close(self) -> None:
        """End every job still running, then the server (at once: its interpreter's teardown is seconds of
        nothing), and remove the job folders."""
        for job_id in list(self._pids):
            self.kill(job_id)
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                self._server.stdin.close()
                try:
                    self._server.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    os.killpg(self._server.pid, signal.SIGKILL)
                    self._server.wait()
            self._server = None
            self._ready = False
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # jobs ----------------------------------------------------------------------------------------------------------

    def new_workdir(self, kind: str) -> Path:
        path = self._root / f"{next(self._ids):04d}-{kind}"
        path.mkdir(mode=0o700)
        return path

    def start(self, spec: dict[str, Any], workdir: Path, *, compile_timeout_s: float, run_timeout_s: float,
              read_only: tuple[str, ...] = (), cache_key: str = "shared") -> Job:
        """Start one job in a fresh child. `read_only`: the files it reads besides Python and egg (the problem, the
        candidate); `cache_key`: whose compile caches it may write (one candidate's, one problem's)."""
        (workdir / "spec.json").write_text(json.dumps(spec))
        job = Job(self, workdir, compile_timeout_s, run_timeout_s)
        try:
            server = self._ensure_server()
            request = {"job_id": job.job_id, "spec_path": str(workdir / "spec.json"), "log_path": str(workdir / "log.txt"),
                       "isolation": self.plan(workdir, read_only, cache_key).to_json(), "trusted_cache": str(self._trusted_cache())}
            with self._lock:
                self._jobs[job.job_id] = job
                server.stdin.write((json.dumps(request) + "\n").encode())
                server.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            job.listener.close()
            self._forget(job.job_id)
            raise InfraError(f"the worker server failed: {exc}") from exc
        job._begin()
        return job

    def run(self, spec: dict[str, Any], workdir: Path, *, compile_timeout_s: float, run_timeout_s: float, **kwargs) -> JobOutcome:
        """Run one job to its end (kill its whole process group if a phase outlives its timeout)."""
        return self.start(spec, workdir, compile_timeout_s=compile_timeout_s, run_timeout_s=run_timeout_s, **kwargs).wait()

    def kill(self, job_id: str) -> None:
        pid = self._pids.get(job_id)
        if pid is not None:
            _kill_group(pid)

    def _forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._pids.pop(job_id, None)

    # isolation -----------------------------------------------------------------------------------------------------

    def plan(self, workdir: Path, read_only: tuple[str, ...], cache_key: str) -> isolation.Plan:
        """What one job may see: Python, egg's package, `read_only`; writable: its folder and its compile caches."""
        cache = self._sandbox_cache(cache_key)
        caches = {"TRITON_CACHE_DIR": str(cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                  "CUDA_CACHE_PATH": str(cache / "nv"), "XDG_CACHE_HOME": str(cache / "xdg")}
        env = isolation.job_environment(clean_environment(self.device), home=str(workdir / "home"), caches=caches)
        shown = (*self.python_paths, str(pipeline.ROOT / "pipeline"), *(os.path.abspath(p) for p in read_only))
        hidden = (str(pipeline.ROOT), str(Path.home()), os.getcwd(), str(self.cache_root), str(Path.home() / ".config"))
        enabled = self.isolate and not isolation.disabled()
        return isolation.Plan(str(workdir), shown, (str(cache),), env, enabled, tuple(h for h in hidden if h != "/"))

    def _sandbox_cache(self, key: str) -> Path:
        path = self.cache_root / "sandbox" / re.sub(r"[^A-Za-z0-9_.-]", "_", key)
        for sub in ("triton", "inductor", "nv", "xdg"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        return path

    def _trusted_cache(self) -> Path:
        path = self.cache_root / "judge-compile"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path


def _scratch_root() -> str | None:
    """Memory-backed /dev/shm when it has room (outputs of GiB travel through job folders), else the temp dir."""
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return None
    free = stats.f_bavail * stats.f_frsize
    return "/dev/shm" if free >= SHM_MIN_FREE_BYTES and os.access("/dev/shm", os.W_OK) else None


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # the child may not have made its own group yet
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _read_phase(workdir: Path) -> str:
    try:
        return (workdir / "phase").read_text().strip()
    except FileNotFoundError:
        return ""


def _tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")
