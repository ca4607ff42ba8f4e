"""How long must the GPU be loaded before a power-limited kernel's timing settles?

egg's timing loop on suite references, from a rested GPU (3 s idle) and from a loaded one (1 s of calls back to
back), for several warm-up lengths (EvalOptions.warmup_ms), against triton.testing.do_bench from each state, with the
GPU's SM clock and power while each ran (nvidia-smi every 50 ms). Run on the GPU machine from the repository root:
    PYTHONPATH=. python bench/judge_clocks.py --out OUTDIR [--problems 6_GEMM_Square_FP16] [--settles 0,250,1000] [--rounds 3]
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

from pipeline.judge.probes import hold_fp32_to_fp32

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


def loop_variant_ms(model, sets, sync_every: int, rotate: bool, trials: int = 100) -> float:
    """egg's loop (warm-up, until_launched head start, L2 flush, events) but with the device synced only every
    `sync_every` trials, and the input sets rotated into the buffers or not: which of egg's pauses between trials
    (the sync, the input copies) keeps a power-limited GPU's clock above do_bench's."""
    from pipeline.judge import timing
    from pipeline.judge.worker import load_set
    from judge_h200 import OPTIONS

    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
    flush = timing.L2Flush(OPTIONS.l2_flush_bytes, torch.device("cuda"))
    head = timing.HeadStart(OPTIONS.head_start_ms, OPTIONS.head_start_mode)
    prepare = (lambda i: load_set(buffers, sets[i % len(sets)])) if rotate else (lambda i: None)
    with torch.no_grad():
        timing.settle(lambda: model(*buffers), prepare, flush, OPTIONS.warmup_ms)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(trials)]
        for i, (start, end) in enumerate(events):
            prepare(i)
            flush()
            head.queue()
            start.record()
            model(*buffers)
            end.record()
            head.launched()
            if (i + 1) % sync_every == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


JUDGE = "the judge's loop (time_model)"
VARIANTS = {  # name -> (sync every, rotate the inputs)
    "sync every trial, inputs rotated": (1, True),
    "sync every 10 trials, inputs rotated": (10, True),
    "sync every trial, inputs in place": (1, False),
    "sync every 10 trials, inputs in place": (10, False),
}


def variants(name: str, rounds: int, log) -> dict:
    """From a loaded GPU, each loop variant and do_bench, `rounds` times in turn."""
    path = next(SUITE.glob(f"level*/{name}.py"))
    model, sets = build(str(path), torch.device("cuda"))
    row: dict = {"problem": name, "runs": {v: [] for v in [JUDGE, *VARIANTS, "do_bench"]}}
    prepare("loaded", model, sets)
    for _ in range(rounds):
        row["runs"][JUDGE].append(egg_eager_ms(model, sets)["median_ms"])
        for variant, (every, rotate) in VARIANTS.items():
            row["runs"][variant].append(loop_variant_ms(model, sets, every, rotate))
        row["runs"]["do_bench"].append(do_bench_ms(model, sets))
        log(f"{name}: " + ", ".join(f"{v[:24]} {ms[-1]:.4f}" for v, ms in row["runs"].items()))
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
    for row in report.get("variants", []):
        bench = statistics.median(row["runs"]["do_bench"])
        lines += [f"## {row['problem']}: which pause between trials makes the difference", "",
                  "| loop | every run (ms) | median / do_bench's median |", "|---|---|---|"]
        for variant, runs in row["runs"].items():
            lines.append(f"| {variant} | {[round(v, 4) for v in runs]} | {statistics.median(runs) / bench:.3f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", default="6_GEMM_Square_FP16,9_Linear_SiLU_Residual_BF16,23_Softmax")
    parser.add_argument("--settles", default="0,100,250,500,1000", help="warm-up lengths (ms, comma-separated)")
    parser.add_argument("--variants", default="", help="problems to time with egg's loop variants (sync every N trials, inputs in place) against do_bench")
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
        report["variants"] = []
        for name in [n for n in args.variants.split(",") if n]:
            report["variants"].append(variants(name, max(args.rounds, 1), log))
            args.out.joinpath("judge_clocks.json").write_text(json.dumps(report, indent=1))
    finally:
        if smi is not None:
            smi.terminate()
    text = summarize(report, read_clocks(clocks_path))
    args.out.joinpath("judge_clocks.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
