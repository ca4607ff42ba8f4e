#!/usr/bin/env python3
"""A stand-in for Nsight Compute's `ncu`, for testing the profiler's plumbing on a machine without a GPU.

Collect (`... --export REPORT ... python -m pipeline.profiler.driver SPEC`): writes REPORT and the driver's result file
(as the driver would), or answers ERR_NVGPUCTRPERM when $EGG_FAKE_NCU_DENY is set. Import (`--import REPORT --csv`):
prints the CSV file named by $EGG_FAKE_NCU_CSV.
"""

import json
import os
import sys
from pathlib import Path

args = sys.argv[1:]
if "--import" in args:
    sys.stdout.write(Path(os.environ["EGG_FAKE_NCU_CSV"]).read_text())
    sys.exit(0)
if os.environ.get("EGG_FAKE_NCU_DENY"):
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
Path(args[args.index("--export") + 1]).write_bytes(b"fake ncu-rep")
spec = json.loads(Path(args[-1]).read_text())
Path(spec["result_path"]).write_text(json.dumps({"environment": {"gpu": "fake H200"}, "launches": {}, "compiled": []}))
