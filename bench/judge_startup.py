"""What a fresh process pays before the judge can work, alone and beside others: the facts behind a repeat `egg check`.

Session 8 on the H200 saw a repeat check reach its verdict only 4.5-5.4 s after it started (torch's import), and
a candidate's worker take 3.6-5.5 s from its fork to its first word when the reference's worker started beside it,
against 0.9 s alone. This bench separates the suspects, each in fresh processes, started 1, 2 and 3 at a time:
- `import torch` (and `import torch, triton`);
- a CUDA context (`torch.ones(1, device="cuda")`) in a process that has imported torch;
- the machine's CPU quota (cgroup cpu.max), the CPUs this process may use, and where torch's files lie.

Run from the repository root on the GPU machine (torch and the standard library only):
    python3 bench/judge_startup.py --out $OUT/startup
Writes judge_startup.json and judge_startup.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = {
    "import_torch": "import time; t = time.monotonic(); import torch; print(time.monotonic() - t)",
    "import_torch_triton": "import time; t = time.monotonic(); import torch, triton, triton.language; print(time.monotonic() - t)",
    "cuda_context": "import torch, time; t = time.monotonic(); torch.ones(1, device='cuda'); torch.cuda.synchronize(); "
                    "print(time.monotonic() - t)",
}


def together(code: str, count: int) -> list[float]:
    """Start `count` fresh Pythons at once; each prints the seconds its timed part took."""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]
    seconds = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"child failed: {err[-2000:]}")
        seconds.append(round(float(out.strip().splitlines()[-1]), 3))
    return seconds


def machine() -> dict[str, str]:
    facts = {"nproc": str(os.cpu_count()), "usable_cpus": str(len(os.sched_getaffinity(0)))}
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        try:
            facts[path] = Path(path).read_text().strip()
        except OSError:
            pass
    probe = subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                           capture_output=True, text=True)
    where = probe.stdout.strip()
    facts["torch_dir"] = where
    df = subprocess.run(["df", "-hT", where or "/"], capture_output=True, text=True)
    facts["torch_filesystem"] = df.stdout.strip().splitlines()[-1] if df.stdout else df.stderr.strip()
    return facts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3, help="repeats of each measurement")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(), "results": {}}
    together(CHILD["import_torch_triton"], 1)  # the page cache warm, as for a repeat check
    for name, code in CHILD.items():
        for count in (1, 2, 3):
            rows = [together(code, count) for _ in range(args.rounds)]
            report["results"][f"{name} x{count}"] = rows
            slowest = [max(r) for r in rows]
            print(f"{name} x{count}: slowest of each round {slowest} s", flush=True)
    (out / "judge_startup.json").write_text(json.dumps(report, indent=1))
    lines = ["# A fresh process's start-up on this machine, alone and beside others", "",
             "Machine: " + json.dumps(report["machine"]), "",
             "| what | processes at once | seconds, each process, each round | median of the slowest |", "|---|---|---|---|"]
    for key, rows in report["results"].items():
        name, count = key.rsplit(" x", 1)
        lines.append(f"| {name} | {count} | {rows} | {statistics.median(max(r) for r in rows):.2f} |")
    (out / "judge_startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main(sys.argv[1:])
    print(f"done in {time.monotonic() - started:.1f} s")
    sys.exit(code)
