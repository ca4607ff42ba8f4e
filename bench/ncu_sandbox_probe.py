"""NCU inside the judge's sandbox, with its log: what `egg profile --mode ncu` runs, for a fixture, printed in full.

Run on the GPU machine from the repository root: `python3 bench/ncu_sandbox_probe.py [--also-unisolated]`. It
collects the copy fixture's profile through pipeline.profiler.ncu.collect (NCU and the profiler's driver in the
sandbox) and prints NCU's error and the tail of its output; with --also-unisolated, the
same with EGG_ISOLATION=off, to tell the sandbox's part from NCU's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def probe(label: str) -> None:
    from pipeline.profiler import ncu
    from pipeline.profiler.profiling import ProfileOptions, write_spec
    from pipeline.judge.sandbox import clean_environment

    fixtures = ROOT / "tests" / "fixtures" / "profiler"
    candidate, problem = str(fixtures / "copy_triton.py"), str(fixtures / "copy_problem.py")
    path = ncu.find_ncu()
    print(f"=== {label}: ncu {path} -> {path and os.path.realpath(path)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="egg-ncu-probe-") as folder:
        workdir = Path(folder) / "job"
        workdir.mkdir()
        spec = write_spec(workdir, candidate, problem, "ncu", ProfileOptions(mode="ncu"))
        run = ncu.collect(path, workdir, spec, clean_environment("cuda"), timeout_s=240, read_only=(candidate, problem), keep_dir=Path(folder))
        print(f"error: {run.error or '(none)'}; csv {len(run.csv_text)} chars; report {run.report_path or '-'}")
        print("ncu's output (its last 8000 characters):\n" + run.log_tail, flush=True)
        print("files:", json.dumps(sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if ".root" not in p.parts)[:60]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--also-unisolated", action="store_true")
    args = parser.parse_args()
    probe("sandboxed")
    if args.also_unisolated:
        os.environ["EGG_ISOLATION"] = "off"
        probe("EGG_ISOLATION=off")


if __name__ == "__main__":
    main()
