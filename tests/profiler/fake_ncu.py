#!/usr/bin/env python3
"""A stand-in for Nsight Compute's `ncu`, for testing the profiler's plumbing on a machine without a GPU.

Collect (`... --export REPORT ... python -m pipeline.profiler.driver SPEC`): writes REPORT and the driver's result file
(as the driver would); fake_ncu_deny.py answers ERR_NVGPUCTRPERM instead (collect runs in the judge's sandbox, whose
environment keeps none of the test's variables). Import (`--import REPORT --csv`, run outside it): prints the CSV
file named by $EGG_FAKE_NCU_CSV.
"""

import json
import os
import sys
from pathlib import Path

args = sys.argv[1:]
if "--import" in args:
    sys.stdout.write(Path(os.environ["EGG_FAKE_NCU_CSV"]).read_text())
    sys.exit(0)
Path(args[args.index("--export") + 1]).write_bytes(b"fake ncu-rep")
spec = json.loads(Path(args[-1]).read_text())
# where it ran: NCU and its target run in the judge's sandbox (PID 2 of their own namespace, not root)
where = {"gpu": "fake H200", "pid": str(os.getpid()), "root": str(os.geteuid() == 0)}
Path(spec["result_path"]).write_text(json.dumps({"environment": where, "launches": {}, "compiled": []}))
