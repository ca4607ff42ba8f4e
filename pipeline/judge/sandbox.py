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
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pipeline
from pipeline.judge import channel, isolation, limits
from pipeline.judge.channel import CALL_NAME, COMPILE_PHASES, MAX_MESSAGES, PHASES
from pipeline.judge.launcher import job_json

# What egg's child processes keep of the parent's environment (pipeline.judge.isolation narrows it again per job).
_START_NAMES = frozenset({"HOME", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "PATH", "PYTHONPATH",
                          "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
                          "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CC", "CXX"})
_START_PREFIXES = ("EGG_", "LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "CUBLAS_", "CUDNN_", "NCCL_", "NVSHMEM_", "XDG_")
LOG_TAIL_CHARS = 4000
MAX_RESULT_BYTES = 32 << 20  # a result.json larger than this is not a worker's
MAX_REGION_BYTES = 1 << 40
MAX_CALLS = 1000  # call records one job may send
MEMORY_LOOK_S = 0.1  # how often the parent sums a job's resident memory
SHM_MIN_FREE_BYTES = 32 << 30


class InfraError(RuntimeError):
    """The sandbox itself failed (not the candidate): the fork server died or could not start."""


def clean_environment(device: str) -> dict[str, str]:
    """What of the parent's environment egg's child processes start with: only names a worker needs (Python's and
    the loader's, locale, egg's, CUDA's, Triton's, torch's...), never one that looks secret. A whitelist, not a
    blacklist: a forked job's /proc/<pid>/environ shows this start-up environment, so a DATABASE_URL or a GH_AUTH
    of the user's must never be in it."""
    env = {k: v for k, v in os.environ.items() if (k in _START_NAMES or k.startswith(_START_PREFIXES)) and not isolation.looks_secret(k)}
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
    """How a job ended: its result (if it wrote one it could be read), exit code, timeout phase, the last phase it
    reported, its log tail, and what the judge saw on its channel: protocol violations (`tampering`), outputs that
    could not be read (`output_errors`), and its clock marks on the judge's clock (`marks`, seconds)."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: str | None  # "compile" or "run" when a timeout killed it
    phase: str
    log_tail: str
    workdir: Path
    duration_s: float
    tampering: tuple[str, ...] = ()
    output_errors: dict[str, str] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    result_error: str = ""  # why a result.json that exists could not be taken
    calls: tuple[dict, ...] = ()  # each call's record, as the job sent it when the call returned
    timing: dict | None = None  # the timed trials' summary, as the job sent it when they ended
    output_dropped: int = 0  # bytes of the job's printed output the log dropped (its tail is kept)
    memory_limit_bytes: int | None = None  # the limit the parent held the job to (`timed_out` "memory" past it)
    peak_rss_bytes: int = 0  # the most resident memory the parent saw the job's processes hold


@dataclass
class Handlers:
    """What the judge does with a job's messages: `check(call, specs)` says why outputs may not be taken ('' when
    they may), `outputs(call, tensors)` takes them, `sample(call)` answers a request for a call's subsample (None:
    a request the job had no business making)."""

    check: Callable[[str, list], str] = lambda call, specs: ""
    outputs: Callable[[str, list], None] = lambda call, tensors: None
    sample: Callable[[str], dict | None] = lambda call: None
    waits: frozenset[str] = frozenset()  # the messages this side will send (start, inputs, go): the only waits excused
    call: Callable[[dict], None] = lambda record: None  # a call's record, as it returned


class Job:
    """One running job: its timeouts are watched on this process's clock, and its channel read, on two threads.

    Everything the job sends is checked against the protocol (pipeline.judge.worker's phases in order, outputs of
    known calls once each, requests the judge expects); anything else is recorded as tampering, never obeyed. The
    time the job spends waiting for the judge (for `start`, `inputs`, `go`) does not count against its timeouts,
    and that time is measured here: from its report that it waits to the moment this side sends the message, so a
    job cannot stretch its own limits."""

    def __init__(self, pool: WorkerPool, workdir: Path, compile_timeout_s: float, run_timeout_s: float,
                 handlers: Handlers | None = None, memory_bytes: int | None = None) -> None:
        self.pool, self.workdir = pool, workdir
        self.memory_bytes = memory_bytes
        self.peak_rss = 0
        self._on_tmpfs = str(workdir).startswith("/dev/shm/")  # files there are memory: they count against the limit
        self.job_id = workdir.name
        self.compile_timeout_s, self.run_timeout_s = compile_timeout_s, run_timeout_s
        self.handlers = handlers or Handlers()
        self.events: queue.Queue = queue.Queue()
        self.listener = channel.Listener(workdir)
        self.connection: channel.Connection | None = None
        self.connected = threading.Event()
        self.exited = threading.Event()
        self.started = time.monotonic()
        self.phase = ""
        self.tampering: list[str] = []
        self.output_errors: dict[str, str] = {}
        self.marks: dict[str, float] = {}
        self._kept: set[str] = set()
        self.calls: list[dict] = []
        self.timing: dict | None = None
        self.output_dropped = 0
        self._messages = 0
        self._state = threading.Lock()
        self._sent: dict[str, float] = {}
        self._pending: dict[str, dict] = {}  # messages to send when the job reaches a phase (`send_when`)
        self._waits: dict[str, float] = {}  # a wait the job reported and this side has not yet ended: since when
        self._waited = 0.0
        self._run_started: float | None = None
        self._waited_at_run = 0.0
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
        with self._state:
            kind = message.get("type", "")
            now = time.monotonic()
            self._sent.setdefault(kind, now)
            since = self._waits.pop(kind, None)
            if since is not None:
                self._waited += now - since
        try:
            self.connection.send(message)
            return True
        except channel.ChannelClosed:
            return False

    def send_when(self, phase: str, message: dict) -> None:
        """Send `message` once the job reports `phase` (at once if it has already), never before: what the job
        learns, it learns when it needs it."""
        with self._state:
            reached = self.phase and PHASES.index(self.phase) >= PHASES.index(phase)
            if not reached:
                self._pending[phase] = message
                return
        self.send(message)

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
            except (channel.ChannelClosed, TimeoutError) as exc:
                if "not JSON" in str(exc) or "not a JSON object" in str(exc):
                    self._tamper(f"the job sent the judge {exc}")
                break
            try:
                self._take(message, fds)
            except Exception as exc:  # the judge's own fault: never a dead reader and a hung job
                self.output_errors.setdefault("judge", f"{type(exc).__name__}: {exc}")
            finally:
                for fd in fds:
                    _close(fd)
        self.connection.close()

    def _tamper(self, what: str) -> None:
        """Note a protocol violation and end the job at once: nothing it does from here is worth waiting for."""
        if len(self.tampering) < 20:
            self.tampering.append(what)
        if len(self.tampering) == 1:
            self.kill()

    def _take(self, message: dict, fds: list[int]) -> None:
        self._messages += 1
        if self._messages > MAX_MESSAGES:
            if self._messages == MAX_MESSAGES + 1:
                self._tamper(f"more than {MAX_MESSAGES} messages on the channel")
            return
        if self.tampering:
            return  # the job is being ended: nothing more it says is taken
        kind = message.get("type")
        if kind == "phase":
            self._phase(message.get("name"))
        elif kind == "outputs":
            self._outputs(message, fds)
        elif kind == "sample":
            self._sample(message.get("call"))
        elif kind == "clock":
            self._clock(message.get("mark"))
        elif kind == "call" and isinstance(message.get("record"), dict) and len(self.calls) < MAX_CALLS:
            name = message["record"].get("name")
            if not isinstance(name, str) or any(c.get("name") == name for c in self.calls):
                self._tamper(f"a second record of call {str(name)[:40]!r}")
                return
            self.calls.append(message["record"])
            self.handlers.call(message["record"])
        elif kind == "timing" and isinstance(message.get("summary"), dict) and self.timing is None:
            self.timing = message["summary"]
        else:
            self._tamper(f"an unexpected message of type {str(kind)[:40]!r} on the channel")

    def _phase(self, name: object) -> None:
        now = time.monotonic()
        if not isinstance(name, str) or name not in PHASES:
            self._tamper(f"an unknown phase {str(name)[:40]!r}")
            return
        if self.phase and PHASES.index(name) < PHASES.index(self.phase):
            self._tamper(f"phase {name} reported after {self.phase}")
            return
        if name.startswith("wait_") and name[5:] not in self.handlers.waits:
            self._tamper(f"a wait for {name[5:]}, which the judge never sends this job")
            return
        with self._state:
            self.phase = name
            for since in self._waits.values():  # a job that reports progress has stopped waiting
                self._waited += now - since
            self._waits.clear()
            if name.startswith("wait_") and name[5:] not in self._sent:
                self._waits[name[5:]] = now
            if name not in COMPILE_PHASES and self._run_started is None:
                self._run_started = now
                self._waited_at_run = self._waited + sum(now - since for since in self._waits.values())
            due = [self._pending.pop(p) for p in list(self._pending) if PHASES.index(p) <= PHASES.index(name)]
        for message in due:
            self.send(message)

    def _outputs(self, message: dict, fds: list[int]) -> None:
        from pipeline.judge import devicemem
        from pipeline.judge.tensorfile import OutputError, tensor_specs

        call = message.get("call")
        if not isinstance(call, str) or not CALL_NAME.match(call) or call in self._kept:
            self._tamper(f"outputs of {str(call)[:40]!r} that the judge did not expect")
            return
        self._kept.add(call)
        try:
            specs = tensor_specs(message)
            refused = self.handlers.check(call, [(d, s) for d, s, _ in specs])
            if refused:
                self._tamper(refused)
                return
            tensors = self._materialize(call, message, specs, fds)
        except OutputError as exc:
            self.output_errors[call] = str(exc)
            return
        except devicemem.DeviceMemoryError as exc:
            self.output_errors[call] = f"outputs handed over on the GPU could not be mapped here: {exc}"
            return
        self.handlers.outputs(call, tensors)

    def _materialize(self, call: str, message: dict, specs: list, fds: list[int]) -> list:
        from pipeline.judge import devicemem
        from pipeline.judge.tensorfile import OutputError, nbytes, read_file, read_region

        if self.pool.device != "cuda" or not specs or all(offset is None for _, _, offset in specs):
            if fds:
                raise OutputError("descriptors came with outputs sent as files")
            claimed = sum(nbytes(dtype, shape) for dtype, shape, _ in specs)
            if self.memory_bytes and claimed > self.memory_bytes:  # read into this process: a sparse file costs the job nothing
                raise OutputError(f"call {call} claimed {claimed} bytes of outputs, more than the job's memory limit of {self.memory_bytes}")
            tensors = [read_file(self.workdir, call, i, dtype, shape) for i, (dtype, shape, _) in enumerate(specs)]
            self._remove_files(call, len(specs))
            return tensors
        size = message.get("size")
        if len(fds) != 1 or not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_REGION_BYTES:
            raise OutputError("GPU outputs need one descriptor and a size")
        fd = os.dup(fds[0])
        region = devicemem.open_region(fd, size)  # closes fd
        if any(offset is None for _, _, offset in specs):
            raise OutputError("GPU outputs with a tensor that has no offset")
        return [read_region(region, dtype, shape, offset) for dtype, shape, offset in specs]

    def _remove_files(self, call: str, count: int) -> None:
        """Delete a call's output files once read: this process holds what they said, and a job folder on /dev/shm
        is the machine's memory (kept to the job's end, 8 sets of 8 GB outputs went over its limit)."""
        from pipeline.judge.tensorfile import file_name

        for i in range(count):
            try:
                os.unlink(self.workdir / file_name(call, i))
            except OSError:
                pass

    def raise_memory_limit(self, memory_bytes: int) -> None:
        """Hold the job to `memory_bytes` from now on, if that is more than its limit (the problem's sizes became
        known once it had started). The parent's watch only: a CPU job's own address-space limit stays."""
        if self.memory_bytes:
            self.memory_bytes = max(self.memory_bytes, memory_bytes)

    def _sample(self, call: object) -> None:
        answer = self.handlers.sample(call) if isinstance(call, str) else None
        if answer is None:
            self._tamper(f"a request for the subsample of {str(call)[:40]!r}")
            return
        try:
            self.connection.send({"type": "sample", "call": call, "keep": bool(answer), **answer})
        except channel.ChannelClosed:
            pass

    def _clock(self, mark: object) -> None:
        if not isinstance(mark, str) or len(mark) > 64 or mark in self.marks or len(self.marks) >= 16:
            self._tamper(f"a clock mark {str(mark)[:40]!r} the judge did not expect")
            return
        self.marks[mark] = time.monotonic()

    # timeouts -----------------------------------------------------------------------------------------------------

    def _watch_guarded(self) -> None:
        try:
            self._exit = self._watch()
        except BaseException as exc:  # an InfraError is raised to the caller of wait()
            self._error = exc
        finally:
            self.exited.set()

    def waited_s(self, now: float) -> float:
        """Seconds the job has spent waiting for this side (ended waits, and the one going on)."""
        with self._state:
            return self._waited + sum(now - since for since in self._waits.values())

    def _watch(self) -> tuple[int | None, str | None]:
        pid, next_look = None, 0.0
        while True:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                event = None
            if event is not None:
                if event["event"] == "started":
                    pid = event["pid"]
                elif event["event"] == "exited":
                    self.output_dropped = int(event.get("dropped") or 0)
                    return event["returncode"], None
                elif event["event"] == "server_died":
                    raise InfraError("the worker server died")
            now = time.monotonic()
            waited = self.waited_s(now)
            run_started = self._run_started
            if run_started is None:
                overdue, which = now - self.started - waited > self.compile_timeout_s, "compile"
            else:  # waits before the run began were the compile phase's
                overdue, which = now - run_started - (waited - self._waited_at_run) > self.run_timeout_s, "run"
            if overdue and pid is not None:
                _kill_group(pid)
                self._wait_exit()
                return None, which
            if self.memory_bytes and pid is not None and now >= next_look:
                next_look = now + MEMORY_LOOK_S
                files = limits.folder_bytes(str(self.workdir)) if self._on_tmpfs else 0
                self.peak_rss = max(self.peak_rss, limits.tree_rss_bytes(pid) + files)
                if self.peak_rss > self.memory_bytes:
                    _kill_group(pid)
                    self._wait_exit()
                    return None, "memory"

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
            raise self._error if isinstance(self._error, InfraError) else InfraError(str(self._error))
        returncode, timed_out = self._exit
        result, error = None, ""
        if returncode == 0:
            result, error = read_result(self.workdir / "result.json")
            if result is not None and self.phase != "done" and "failure" not in result:
                ended = f" (the judge ended it: {'; '.join(self.tampering)})" if self.tampering else ""
                result, error = None, f"the job ended at phase {self.phase or 'start-up'} without finishing, yet left a result{ended}"
        return JobOutcome(result, returncode, timed_out, self.phase, _tail(self.workdir / "log.txt"), self.workdir,
                          time.monotonic() - self.started, tuple(self.tampering), dict(self.output_errors), dict(self.marks), error,
                          tuple(self.calls), self.timing, self.output_dropped, self.memory_bytes, self.peak_rss)


def read_result(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A job's result.json, read without following a link or blocking, at most MAX_RESULT_BYTES: (result, '') or
    (None, why not)."""
    try:
        data = _read_plain(path, MAX_RESULT_BYTES)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"result.json could not be read: {exc}"
    try:
        result = job_json(data)  # strict and bounded: no NaN, no runaway nesting, no millions of values
    except ValueError as exc:
        return None, f"result.json is not JSON: {exc}"
    if not isinstance(result, dict):
        return None, "result.json is not a JSON object"
    return result, ""


def _read_plain(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes of a regular file (its last ones with `tail`), never following a link or blocking on
    a FIFO; OSError for anything that is not a plain file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a plain file")
        if info.st_size > limit and not tail:
            raise OSError(f"{path.name} is larger than {limit} bytes")
        start = max(0, info.st_size - limit)
        return os.pread(fd, limit, start)
    finally:
        os.close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class WorkerPool:
    """One fork server for a device; `start()` runs one job in a fresh, isolated child of it. Thread-safe.

    `isolate=False` runs jobs unisolated (tests that show what a fixture would see without the sandbox; and
    EGG_ISOLATION=off does the same): the verdict's environment says so."""

    def __init__(self, device: str, root: str | os.PathLike | None = None, *, cache_root: str | os.PathLike | None = None,
                 isolate: bool = True) -> None:
        self.device = device
        self.isolate = isolate
        scratch = root or _scratch_root()
        remove_stale_job_folders(scratch)
        self._root = Path(tempfile.mkdtemp(prefix="egg-jobs-", dir=scratch))
        os.chmod(self._root, 0o711)  # a job running as another uid reaches its own folder, lists none
        (self._root / OWNER_FILE).write_text(str(os.getpid()))
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
              read_only: tuple[str, ...] = (), cache_key: str = "shared", handlers: Handlers | None = None,
              job_limits: limits.Limits | None = None) -> Job:
        """Start one job in a fresh child. `read_only`: the files it reads besides Python and egg (the problem, the
        candidate); `cache_key`: whose compile caches it may write (one candidate's, one problem's); `handlers`:
        what to do with its outputs and requests as they come."""
        (workdir / "spec.json").write_text(json.dumps(spec))
        job_limits = job_limits or limits.default_limits()
        job = Job(self, workdir, compile_timeout_s, run_timeout_s, handlers, job_limits.memory_bytes)
        try:
            server = self._ensure_server()
            request = {"job_id": job.job_id, "spec_path": str(workdir / "spec.json"), "log_path": str(workdir / "log.txt"),
                       "isolation": self.plan(workdir, read_only, cache_key).to_json(), "trusted_cache": str(self._trusted_cache()),
                       "limits": job_limits.to_json(), "device": self.device}
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
        """A job's compile caches, kept between its checks. Jobs write them, so one that is larger, deeper or fuller
        than compile caches are (a job that kept gigabytes there, or a tree longer than PATH_MAX) is discarded
        before the next job gets it, never walked by root or handed on."""
        path = self.cache_root / "sandbox" / re.sub(r"[^A-Za-z0-9_.-]", "_", key)
        if path.exists() and not cache_fits(path):
            aside = self.cache_root / "discarded" / f"{path.name}-{time.time_ns()}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, aside)
            shutil.rmtree(aside, ignore_errors=True)
        for sub in ("triton", "inductor", "nv", "xdg"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        return path

    def _trusted_cache(self) -> Path:
        path = self.cache_root / "judge-compile"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path


# What a job's kept compile caches may hold: Triton's, Inductor's and CUDA's caches of one candidate or problem
# are megabytes, a few folders deep.
CACHE_LIMIT_BYTES = 2 << 30
CACHE_LIMIT_ENTRIES = 50_000
CACHE_LIMIT_DEPTH = 16


def cache_fits(path: Path) -> bool:
    """Whether a kept cache is within CACHE_LIMIT_BYTES (blocks on disk), CACHE_LIMIT_ENTRIES and CACHE_LIMIT_DEPTH
    and holds no link, walked without following any; an entry that cannot be read makes it unfit."""
    used, entries, todo = 0, 0, [(str(path), 0)]
    while todo:
        folder, depth = todo.pop()
        try:
            listing = list(os.scandir(folder))
        except OSError:
            return False
        for entry in listing:
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                return False
            used += info.st_blocks * 512
            if stat.S_ISLNK(info.st_mode):  # compile caches hold no links: one planted there points root somewhere
                return False
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 > CACHE_LIMIT_DEPTH:
                    return False
                todo.append((entry.path, depth + 1))
            if used > CACHE_LIMIT_BYTES or entries > CACHE_LIMIT_ENTRIES:
                return False
    return True


OWNER_FILE = ".owner"  # the pid of the process whose pool made a job folder root


def remove_stale_job_folders(scratch: str | os.PathLike | None) -> list[Path]:
    """Remove the job folder roots (egg-jobs-*) of pools whose process has died (killed before it could clean up):
    they can hold GiBs of outputs on /dev/shm. Returns what was removed."""
    folder = Path(scratch or tempfile.gettempdir())
    removed = []
    for root in folder.glob("egg-jobs-*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours to judge (an older egg's, or one being made)
        if owner != os.getpid() and not _alive(owner):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    """The last `limit` bytes of a job's log, read without loading the file (a job can print gigabytes) and
    without following a link or blocking."""
    try:
        data = _read_plain(path, limit, tail=True)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
