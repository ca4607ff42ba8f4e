"""A long-lived process that forks one fresh child per job, with torch and triton already imported.

Every verdict comes from a process that no other candidate's code has run in, yet starting one costs a fork, not
a Python start and a torch import. CUDA is never initialized here, so each child can initialize it for itself.

Protocol (JSON lines): the parent writes `{"job_id", "spec_path", "log_path"}` on our stdin; we answer
`{"event": "started", "job_id", "pid"}` and, once the child is gone, `{"event": "exited", "job_id", "pid",
"returncode"}` (a negative return code is the signal that killed it). EOF on stdin ends the server and its children.
Imports: torch, triton, numpy and the standard library only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback


def _send(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _child(request: dict) -> None:
    """In the forked child: own process group, output to the job's log, run the job, never return."""
    code = 70
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(request["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(os.path.dirname(request["spec_path"]))
        from pipeline.judge.worker import run_job

        code = run_job(request["spec_path"])
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

    import pipeline
    import pipeline.judge.worker  # noqa: F401

    children: dict[int, str] = {}
    pending = b""
    _send({"event": "ready", "pid": os.getpid(), "pipeline": str(pipeline.ROOT)})
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
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
