"""How long must the GPU be loaded before a power-limited kernel's timing settles?

egg's timing loop on suite references, from a rested GPU (3 s idle) and from a loaded one (1 s of calls back to
back), for several warm-up lengths (EvalOptions.warmup_ms), against triton.testing.do_bench from each state, with the
GPU's SM clock and power while each ran (nvidia-smi every 50 ms). Run on the GPU machine from the repository root:
    PYTHONPATH=src python bench/judge_clocks.py --out OUTDIR [--problems 6_GEMM_Square_FP16] [--settles 0,250,1000] [--rounds 3]
Writes OUTDIR/judge_clocks.json (every number) and OUTDIR/judge_clocks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from judge_h200 import SUITE, build, clock_in, do_bench_ms, egg_eager_ms, read_clocks, start_clock_log  # this folder

from egg.evaluator.probes import hold_fp32_to_fp32

STATES = ("rested", "loaded")


def prepare(state: str, model, sets) -> None:
    """Leave the GPU rested (idle for 3 s) or loaded (calls back to back for 1 s)."""
    torch.cuda.synchronize()
    if state == "rested":
        time.sleep(3.0)
        return
    end = time.monotonic() + 1.0
    with torch.no_grad():
        while time.monotonic() < end:
            for _ in range(4):
                model(*sets[0])
            torch.cuda.synchronize()


def measure(name: str, settles: list[float], rounds: int, log) -> dict:
    path = next(SUITE.glob(f"level*/{name}.py"))
    model, sets = build(str(path), torch.device("cuda"))
    with torch.no_grad():
        model(*sets[0])
    row: dict = {"problem": name, "do_bench": [], "egg": []}
    for _ in range(rounds):
        for state in STATES:
            prepare(state, model, sets)
            t0 = time.time()
            row["do_bench"].append({"state": state, "median_ms": do_bench_ms(model, sets), "window": [t0, time.time()]})
        for settle in settles:
            for state in STATES:
                prepare(state, model, sets)
                egg = egg_eager_ms(model, sets, warmup_ms=settle)
                row["egg"].append({"state": state, "warmup_ms": settle, "median_ms": egg["median_ms"], "ci95_ms": [egg["ci95_low_ms"], egg["ci95_high_ms"]],
                                   "window": egg["window"]})
                log(f"{name}: from {state}, warm-up {settle:g} ms: {egg['median_ms']:.4f} ms")
    del model, sets
    torch.cuda.empty_cache()
    return row


def summarize(report: dict, clocks: list) -> str:
    lines = ["# Timing a power-limited kernel from a rested and a loaded GPU", "", f"Command: `{report['command']}`; {report['gpu']}.", "",
             "do_bench (median, warmup=100 ms, rep=500 ms) from each state, then egg's loop (the judge's defaults but the",
             "warm-up) from each state, in rounds. 'MHz/W': the GPU's mean SM clock and power while it ran.", ""]
    for row in report["rows"]:
        bench = {s: statistics.median(b["median_ms"] for b in row["do_bench"] if b["state"] == s) for s in STATES}
        lines += [f"## {row['problem']}", "",
                  "| | start | warm-up ms | median ms | 95% CI | / do_bench rested | / do_bench loaded | MHz/W |", "|---|---|---|---|---|---|---|---|"]
        for b in row["do_bench"]:
            lines.append(f"| do_bench | {b['state']} | 100 | {b['median_ms']:.4f} | | {b['median_ms'] / bench['rested']:.3f} | "
                         f"{b['median_ms'] / bench['loaded']:.3f} | {clock_in(clocks, b['window'])} |")
        for e in row["egg"]:
            lines.append(f"| egg | {e['state']} | {e['warmup_ms']:g} | {e['median_ms']:.4f} | [{e['ci95_ms'][0]:.4f}, {e['ci95_ms'][1]:.4f}] | "
                         f"{e['median_ms'] / bench['rested']:.3f} | {e['median_ms'] / bench['loaded']:.3f} | {clock_in(clocks, e['window'])} |")
        every = [b["median_ms"] for b in row["do_bench"]]
        lines += ["", f"- do_bench, every run: {min(every):.4f}-{max(every):.4f} ms, spread {(max(every) - min(every)) / statistics.median(every):.1%}"]
        for settle in sorted({e["warmup_ms"] for e in row["egg"]}):
            runs = [e["median_ms"] for e in row["egg"] if e["warmup_ms"] == settle]
            lines.append(f"- egg, warm-up {settle:g} ms, every run: {min(runs):.4f}-{max(runs):.4f} ms, spread "
                         f"{(max(runs) - min(runs)) / statistics.median(runs):.1%}; median / do_bench's median {statistics.median(runs) / statistics.median(every):.3f}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", default="6_GEMM_Square_FP16,9_Linear_SiLU_Residual_BF16,23_Softmax")
    parser.add_argument("--settles", default="0,100,250,500,1000", help="warm-up lengths (ms, comma-separated)")
    parser.add_argument("--rounds", type=int, default=1, help="times over: do_bench from each state, then each warm-up from each state")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    hold_fp32_to_fp32()  # as every worker does

    def log(message: str) -> None:
        print(message, flush=True)

    report = {"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(), "rows": []}
    clocks_path = args.out / "clocks.csv"
    smi = start_clock_log(clocks_path)
    try:
        for name in [n for n in args.problems.split(",") if n]:
            report["rows"].append(measure(name, [float(v) for v in args.settles.split(",") if v], args.rounds, log))
            args.out.joinpath("judge_clocks.json").write_text(json.dumps(report, indent=1))
    finally:
        if smi is not None:
            smi.terminate()
    text = summarize(report, read_clocks(clocks_path))
    args.out.joinpath("judge_clocks.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
