"""A long-lived process that forks one fresh child per job, with torch and triton already imported.

Every verdict comes from a process that no other candidate's code has run in, yet starting one costs a fork, not
a Python start and a torch import. CUDA is never initialized here, so each child can initialize it for itself.

A job's output goes through a pipe to this server, which writes it into the job's log with a cap (`Log`): a job
that prints gigabytes fills no disk, and its tail is kept. Each child isolates itself (pipeline.judge.isolation: its own PID, mount and network namespaces, its own root
file system, an unprivileged uid) before it reads a line of candidate or problem code. This server marks itself
undumpable, so no process of the same user can read its /proc files.

Protocol (JSON lines): the parent writes `{"job_id", "spec_path", "log_path", "isolation", "trusted_cache"}` on our
stdin; we answer `{"event": "started", "job_id", "pid"}` and, once the child is gone, `{"event": "exited",
"job_id", "pid", "returncode"}` (a negative return code is the signal that killed it). Our first line,
`{"event": "ready", "pid", "pipeline", "python_paths"}`, names what a job of ours must be able to read. EOF on stdin
ends the server and its children. Imports: torch, triton, numpy and the standard library only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback

WARM_UP_AFTER_IDLE_S = 0.3  # requests that come together (a reference and a candidate) are forked first


def _send(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


LOG_LIMIT_BYTES = 4 << 20  # a job's log keeps at most about this much: the rest is dropped (and said)
_DROPPED: dict[int, int] = {}  # bytes dropped from the logs of jobs whose output has ended, by pid


class Log:
    """One job's output, relayed from its pipe into its log file with a cap: once the file holds twice the limit,
    it is cut to its last `limit` bytes, so a job that prints gigabytes fills no disk and the tail survives."""

    def __init__(self, path: str, limit: int = LOG_LIMIT_BYTES) -> None:
        self.limit = limit
        # kept open by descriptor: the job may replace the path (a FIFO, a link), never what is written here
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size
        self.dropped = 0

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)
        self.size += len(data)
        if self.size > 2 * self.limit:
            self._cut()

    def _cut(self) -> None:
        tail = os.pread(self.fd, self.limit, self.size - self.limit)
        self.dropped += self.size - len(tail)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, tail)
        self.size = len(tail)

    def close(self) -> None:
        if self.dropped:
            os.write(self.fd, f"\n[egg] {self.dropped} bytes of this job's output were dropped; the last {self.limit} are kept\n".encode())
        os.close(self.fd)


def _child(request: dict, output: int) -> None:
    """In the forked child: own process group, output to the server's pipe, isolation, the job; never returns."""
    code = 70
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.closerange(3, 65536)  # nothing of the server's (its pipes to the judge, other jobs' logs) reaches the job
        os.chdir(os.path.dirname(request["spec_path"]))
        from pipeline.judge import isolation, limits, worker

        job = worker.Job(request["spec_path"])
        job.connect()  # before the sandbox: the connected socket stays ours whatever the job's root becomes
        job.phase("isolation")  # from here to `setup`: the sandbox and, on a GPU, CUDA (`cuda_init`)
        plan = isolation.Plan.from_json(request["isolation"]) if request.get("isolation") else None
        report = None
        if plan is not None:
            report = isolation.enter(plan, prepare=lambda: worker.prepare(job, request.get("trusted_cache"))).to_json()
        if request.get("limits"):
            job_limits = limits.Limits.from_json(request["limits"])
            limits.apply(job_limits, device=request.get("device", "cpu"), unprivileged=isolation.is_sandbox_uid(os.getuid()))
            os.environ["EGG_JOB_MEMORY_BYTES"] = str(job_limits.memory_bytes)
        code = worker.run_job(request["spec_path"], isolation=report, job=job)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    import numpy  # noqa: F401  (preloaded for the children)
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import torch.utils.flop_counter  # noqa: F401  (the reference's costs)

    import pipeline
    import pipeline.judge.worker  # noqa: F401
    from pipeline.judge import isolation
    from pipeline.judge.probes import warm_up

    isolation.make_undumpable()
    children: dict[int, str] = {}
    logs: dict[int, tuple[int, Log]] = {}  # pipe read end -> (child pid, its log)
    pending = b""
    paths = isolation.python_paths(exclude=(str(pipeline.ROOT),))
    _send({"event": "ready", "pid": os.getpid(), "pipeline": str(pipeline.ROOT), "python_paths": paths})
    warmed, idle_since = False, time.monotonic()
    while True:
        readable, _, _ = select.select([0, *logs], [], [], 0.05)
        for fd in [r for r in readable if r in logs]:
            _relay(fd, logs)
        if 0 in readable:
            idle_since = time.monotonic()
        elif not warmed and time.monotonic() - idle_since > WARM_UP_AFTER_IDLE_S:
            # torch's first-use work for the probes (milliseconds now that they import no torch._dynamo): done
            # once here while nothing waits, so later jobs start warm; a job asked for first is never kept waiting
            warm_up(torch.device("cpu"))
            warmed = True
            continue
        if 0 in readable:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                read_end, write_end = os.pipe()
                os.set_blocking(read_end, False)
                pid = os.fork()
                if pid == 0:
                    os.close(read_end)
                    _child(request, write_end)
                os.close(write_end)
                logs[read_end] = (pid, Log(request["log_path"]))
                children[pid] = request["job_id"]
                _send({"event": "started", "job_id": request["job_id"], "pid": pid})
        _reap(children, logs)
    for pid in children:
        _kill_group(pid)


def _relay(fd: int, logs: dict[int, tuple[int, Log]]) -> None:
    """Copy what a job printed into its log (at most a few MiB per turn: one job cannot starve the others)."""
    pid, log = logs[fd]
    for _ in range(16):
        try:
            data = os.read(fd, 1 << 18)
        except BlockingIOError:
            return
        if not data:
            log.close()
            os.close(fd)
            del logs[fd]
            _DROPPED[pid] = log.dropped  # the job's exit is reported later, with this
            return
        log.write(data)
        if len(data) < 1 << 18:
            return


def _reap(children: dict[int, str], logs: dict[int, tuple[int, Log]]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        job_id = children.pop(pid, None)
        if job_id is not None:
            dropped = sum(_drain(fd, logs) for fd in [fd for fd, (owner, _) in logs.items() if owner == pid]) + _DROPPED.pop(pid, 0)
            _send({"event": "exited", "job_id": job_id, "pid": pid, "returncode": os.waitstatus_to_exitcode(status), "dropped": dropped})


def _drain(fd: int, logs: dict[int, tuple[int, Log]]) -> int:
    """What a job that has ended left in its pipe, then its log closed; the bytes its log dropped."""
    pid, log = logs[fd]
    _relay(fd, logs)
    if fd in logs:  # a process of the job still holds the pipe: it dies with the job's namespace
        logs.pop(fd)
        log.close()
        os.close(fd)
    return _DROPPED.pop(pid, log.dropped)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    serve()
