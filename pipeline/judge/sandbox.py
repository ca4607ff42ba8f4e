"""Running jobs in sandboxed worker processes: a fork server per device, timeouts, crashes, and clean environments."""

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pipeline

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
COMPILE_PHASES = ("", "setup", "import", "construct", "first_call")
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


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: its result (if it wrote one), exit code, timeout phase and log tail."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: str | None  # "compile" or "run" when a timeout killed it
    phase: str
    log_tail: str
    workdir: Path
    duration_s: float


class WorkerPool:
    """One fork server for a device; `run()` evaluates one job in a fresh child of it. Thread-safe."""

    def __init__(self, device: str, root: str | os.PathLike | None = None) -> None:
        self.device = device
        self._root = Path(tempfile.mkdtemp(prefix="egg-jobs-", dir=root or _scratch_root()))
        self._lock = threading.Lock()
        self._server: subprocess.Popen | None = None
        self._events: dict[str, queue.Queue] = {}
        self._ids = itertools.count(1)

    # server life ---------------------------------------------------------------------------------------------------

    def _ensure_server(self) -> subprocess.Popen:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                return self._server
            self._server = subprocess.Popen(
                [sys.executable, "-m", "pipeline.judge.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=open(self._root / "forkserver.log", "ab"),
                env=clean_environment(self.device),
                cwd=self._root,
                start_new_session=True,
            )
            ready = self._server.stdout.readline()
            if not ready:
                raise InfraError(f"the worker server did not start; see {self._root / 'forkserver.log'}")
            engine = json.loads(ready).get("pipeline")
            if engine != str(pipeline.ROOT):
                raise InfraError(f"the worker server loaded egg's engine from {engine}, not from {pipeline.ROOT}")
            threading.Thread(target=self._read_events, args=(self._server,), daemon=True).start()
            return self._server

    def _read_events(self, server: subprocess.Popen) -> None:
        for line in server.stdout:
            event = json.loads(line)
            box = self._events.get(event.get("job_id"))
            if box is not None:
                box.put(event)
        for box in list(self._events.values()):
            box.put({"event": "server_died"})

    def close(self) -> None:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                self._server.stdin.close()
                try:
                    self._server.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self._server.pid, signal.SIGKILL)
            self._server = None
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

    def run(self, spec: dict[str, Any], workdir: Path, *, compile_timeout_s: float, run_timeout_s: float) -> JobOutcome:
        """Run one job in a fresh child; kill its whole process group if a phase outlives its timeout."""
        spec_path, log_path = workdir / "spec.json", workdir / "log.txt"
        spec_path.write_text(json.dumps(spec))
        job_id = workdir.name
        box: queue.Queue = queue.Queue()
        self._events[job_id] = box
        start = time.monotonic()
        try:
            server = self._ensure_server()
            with self._lock:
                server.stdin.write((json.dumps({"job_id": job_id, "spec_path": str(spec_path), "log_path": str(log_path)}) + "\n").encode())
                server.stdin.flush()
            returncode, timed_out = self._watch(box, workdir, start, compile_timeout_s, run_timeout_s)
        except (BrokenPipeError, OSError) as exc:
            raise InfraError(f"the worker server failed: {exc}") from exc
        finally:
            self._events.pop(job_id, None)
        result_path = workdir / "result.json"
        result = json.loads(result_path.read_text()) if result_path.exists() and returncode == 0 else None
        return JobOutcome(result, returncode, timed_out, _read_phase(workdir), _tail(log_path), workdir, time.monotonic() - start)

    def _watch(self, box: queue.Queue, workdir: Path, start: float, compile_s: float, run_s: float) -> tuple[int | None, str | None]:
        pid, run_started = None, None
        while True:
            try:
                event = box.get(timeout=0.05)
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
            in_compile = _read_phase(workdir) in COMPILE_PHASES
            if not in_compile and run_started is None:
                run_started = now
            overdue = (now - start > compile_s) if in_compile else (now - run_started > run_s)
            if overdue and pid is not None:
                _kill_group(pid)
                self._wait_exit(box)
                return None, "compile" if in_compile else "run"

    @staticmethod
    def _wait_exit(box: queue.Queue, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if box.get(timeout=0.1)["event"] in ("exited", "server_died"):
                    return
            except queue.Empty:
                continue


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
