"""Runs one Python module in the judge's sandbox: `python -m pipeline.judge.jail SPEC.json`.

The spec (written by pipeline.judge.launcher) holds the isolation plan, the limits, the device and the module with
its arguments. This process dies with the one that started it (PR_SET_PDEATHSIG), enters the sandbox
(pipeline.judge.isolation: its own PID, mount, network and IPC namespaces, a read-only root holding only what the
job needs, an unprivileged uid when egg runs as root, an environment with no secret), applies the limits, writes
what isolation it got to the launcher's report file (opened before, closed after), and then becomes the module
(exec), or the program the
spec names (`argv`): no line of the module's code, or of the user code it imports, runs before all of that.

Imports: the standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from pipeline.judge import isolation, limits


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    ctypes.CDLL(None).prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    plan = isolation.Plan.from_json(spec["plan"])
    # the report goes to the launcher's own folder, opened now (outside the job's view once it is entered) and
    # closed before the job's code runs: the job can neither forge it nor reach the folder
    report_file = open(spec["report_path"], "w") if spec.get("report_path") else None
    report = isolation.enter(plan)  # returns in the job, inside its namespaces, as its own user
    job_limits = limits.Limits.from_json(spec["limits"])
    limits.apply(job_limits, device=spec["device"], unprivileged=isolation.is_sandbox_uid(os.getuid()))
    if report_file is not None:
        json.dump(report.to_json(), report_file)
        report_file.close()
    if spec.get("argv"):  # a program that runs user code itself (NCU, with the profiler's driver as its target)
        os.execv(spec["argv"][0], spec["argv"])
    os.execv(sys.executable, [sys.executable, "-m", spec["module"], *spec["args"]])


if __name__ == "__main__":
    main(sys.argv[1])
