"""A long-lived process that forks one fresh child per job, with torch and triton already imported.

Every verdict comes from a process that no other candidate's code has run in, yet starting one costs a fork, not
a Python start and a torch import. CUDA is never initialized here, so each child can initialize it for itself.

Each child isolates itself (pipeline.judge.isolation: its own PID, mount and network namespaces, its own root
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


def _child(request: dict) -> None:
    """In the forked child: own process group, output to the job's log, isolation, the job; never returns."""
    code = 70
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(request["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.closerange(3, 65536)  # nothing of the server's (its pipes to the judge) reaches the job
        os.chdir(os.path.dirname(request["spec_path"]))
        from pipeline.judge import isolation, worker

        job = worker.Job(request["spec_path"])
        job.connect()  # before the sandbox: the connected socket stays ours whatever the job's root becomes
        job.phase("isolation")  # from here to `setup`: the sandbox and, on a GPU, CUDA (`cuda_init`)
        plan = isolation.Plan.from_json(request["isolation"]) if request.get("isolation") else None
        report = None
        if plan is not None:
            report = isolation.enter(plan, prepare=lambda: worker.prepare(job, request.get("trusted_cache"))).to_json()
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
    pending = b""
    paths = isolation.python_paths(exclude=(str(pipeline.ROOT),))
    _send({"event": "ready", "pid": os.getpid(), "pipeline": str(pipeline.ROOT), "python_paths": paths})
    warmed, idle_since = False, time.monotonic()
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            idle_since = time.monotonic()
        elif not warmed and time.monotonic() - idle_since > WARM_UP_AFTER_IDLE_S:
            # torch's first-use work for the probes (milliseconds now that they import no torch._dynamo): done
            # once here while nothing waits, so later jobs start warm; a job asked for first is never kept waiting
            warm_up(torch.device("cpu"))
            warmed = True
            continue
        if readable:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request)
                children[pid] = request["job_id"]
                _send({"event": "started", "job_id": request["job_id"], "pid": pid})
        _reap(children)
    for pid in children:
        _kill_group(pid)


def _reap(children: dict[int, str]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        job_id = children.pop(pid, None)
        if job_id is not None:
            _send({"event": "exited", "job_id": job_id, "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    serve()
