"""Where does the run-to-run spread of a candidate's median come from? Three ways of timing one candidate.

Run on the GPU machine from the repository root (about a minute):
    PYTHONPATH=. python bench/judge_variance.py --out OUTDIR [--processes 6] [--blocks 6]

  processes: N fresh Python processes, each builds the candidate and its inputs as the judge's worker does and
             times it with the worker's own `time_model` (no judge, no sandbox, nothing else on the GPU);
  placements: in each fresh process, the judge's timing and then --placements - 1 more blocks on fresh allocations:
             how far apart four ways of summarizing them land across processes (which estimator is stable);
  blocks:    one process, N timing blocks, each with freshly allocated input buffers placed after a spacer
             allocation of a different size (so each block's data lands on other physical memory).
If the fresh processes spread as much as the judge's repeats do, the spread is the machine's (clocks, where the
allocator's memory lands), not the judge's; if the blocks spread as much, memory placement alone explains it.

  rotation:  for the suite references where egg read ~5% above triton.testing.do_bench (--rotation), the reference
             timed three ways, twice over: egg's loop (input sets rotated into the buffers before each trial), the
             same loop with the inputs left in place, and do_bench; it tells whether the rotation is the difference.
  head starts (--head-starts fixed:0,fixed:1,until_launched:2): in each fresh process, --rounds alternating blocks
             per head start (what the timing loop queues after the L2 flush: a fixed spin, or a wait until the host
             has launched the call), with the host's launch time per call: whether the spread is the host's launch
             latency landing inside the events.
Writes OUTDIR/judge_variance.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE = ROOT / "examples" / "candidates" / "softmax_triton.py"
PROBLEM = ROOT / "data" / "problems" / "suite" / "level1" / "23_Softmax.py"


def build():
    import torch

    from pipeline.judge.judge import _seeds
    from pipeline.judge.probes import hold_fp32_to_fp32
    from pipeline.judge.worker import load_module, make_inputs
    from pipeline.types import EvalOptions

    options = EvalOptions()
    hold_fp32_to_fp32()
    device = torch.device("cuda")
    problem = load_module(str(PROBLEM), "variance_problem")
    candidate = load_module(str(CANDIDATE), "variance_candidate")
    torch.manual_seed(options.seed)
    init = problem.get_init_inputs()
    torch.manual_seed(options.seed)
    model = candidate.ModelNew(*init).to(device)
    timed = [{"name": f"timed_{k}", "seed": s} for k, s in enumerate(_seeds(options.seed, options.timed_input_sets, "timed"))]
    sets = [make_inputs(problem.get_inputs, spec, device) for spec in timed]
    with torch.no_grad():
        model(*sets[0])  # compile outside the clock
    return options, model, sets


def time_samples(options, model, sets, head_start: str | None = None, launches: list | None = None) -> list[float]:
    import torch

    from pipeline.judge import timing
    from pipeline.judge.worker import time_model

    opts = dataclasses.asdict(options)
    if head_start is not None:  # "mode:ms" (timing.parse_head_start)
        opts["head_start_mode"], opts["head_start_ms"] = timing.parse_head_start(head_start)
    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
    flush = timing.L2Flush(options.l2_flush_bytes, torch.device("cuda"))
    with torch.no_grad():
        samples = time_model(model, buffers, sets, opts, flush)
    if launches is not None:
        launches.append(list(samples.launch_ms))
        launches.append(samples.head_start_capped)
    return list(samples.event_ms)


def time_once(options, model, sets) -> float:
    return statistics.median(time_samples(options, model, sets))


def time_placements(options, model, sets, count: int, *, fresh_first: bool, move_output: bool = False,
                    facts: list | None = None) -> list[list[float]]:
    """`count` timing blocks (per-trial ms), each but perhaps the first on freshly allocated copies of the inputs
    placed behind a spacer of another size (5 MiB to ~190 MiB), so each block's data lands on other memory. With
    `move_output`, the block the previous placement's outputs came from is held too, so the outputs move as well.
    `facts` (if given) gets, per block, the output's address and the copy bandwidth measured right after it."""
    import torch

    from pipeline.judge import timing

    blocks_ms, spacers, held = [], [], []
    for k in range(count):
        if k == 0 and not fresh_first:
            fresh = sets
        else:
            spacers.append(torch.empty((k * 37 + 5) * (1 << 20), dtype=torch.uint8, device="cuda"))
            if move_output and k:
                with torch.no_grad():
                    held.append(model(*sets[0]))  # takes the cached block the last outputs used
            fresh = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in sets]
        blocks_ms.append(time_samples(options, model, fresh))
        if facts is not None:
            with torch.no_grad():
                out = model(*fresh[0])
            facts.append({"output_ptr": hex(out.data_ptr()), "input_ptr": hex(fresh[0][0].data_ptr()),
                          "copy_tb_s": round(timing.copy_bandwidth_bytes_per_s(torch.device("cuda")) / 1e12, 4)})
            del out
        del fresh
    return blocks_ms


def one_process(placements: int, move_output: bool, head_starts: list[str], rounds: int) -> None:
    """With `head_starts`: `rounds` rounds of one timing block per head start ("mode:ms"), alternating, on the same buffers,
    each block's trials and host launch times kept. Otherwise the judge's way (one placement), then
    `placements - 1` more on fresh allocations, so the parent can compare estimators that pool placements."""
    options, model, sets = build()
    if head_starts:
        rows = []
        for _ in range(rounds):
            for spec in head_starts:
                launches: list = []
                rows.append({"head_start": spec, "event_ms": time_samples(options, model, sets, spec, launches), "launch_ms": launches[0],
                             "capped": launches[1]})
        print(json.dumps({"median_ms": statistics.median(rows[0]["event_ms"]), "head_start_blocks": rows}))
        return
    facts: list = []
    blocks_ms = time_placements(options, model, sets, placements, fresh_first=False, move_output=move_output, facts=facts)
    print(json.dumps({"median_ms": statistics.median(blocks_ms[0]), "blocks_ms": blocks_ms, "facts": facts}))


def head_start_table(runs: list[dict]) -> list[str]:
    """Per head start: each process's median from its first block and from all its blocks, their spread across
    processes, and the host's launch time (median, and the worst block's median)."""
    modes = list(dict.fromkeys(b["head_start"] for r in runs for b in r.get("head_start_blocks", [])))
    lines = ["| head start | first block per process (ms) | spread | all blocks per process (ms) | spread | host launch ms, median (worst block) | trials capped |",
             "|---|---|---|---|---|---|---|"]
    for spec in modes:
        per = [[b for b in r["head_start_blocks"] if b["head_start"] == spec] for r in runs if "head_start_blocks" in r]
        first = [round(statistics.median(bs[0]["event_ms"]), 4) for bs in per]
        pooled = [round(statistics.median([t for b in bs for t in b["event_ms"]]), 4) for bs in per]
        launch = [statistics.median(b["launch_ms"]) for bs in per for b in bs]
        capped = sum(b.get("capped", 0) for bs in per for b in bs)
        lines.append(f"| {spec} | {first} | {spread(first):.2%} | {pooled} | {spread(pooled):.2%} | "
                     f"{statistics.median(launch):.3f} ({max(launch):.3f}) | {capped} |")
    return lines


ESTIMATORS = {  # name -> per-process figure from its timing blocks (each a list of per-trial ms)
    "first placement (the judge today)": lambda blocks: statistics.median(blocks[0]),
    "median of all placements' trials": lambda blocks: statistics.median([t for b in blocks for t in b]),
    "median of placement medians": lambda blocks: statistics.median([statistics.median(b) for b in blocks]),
    "fastest placement's median": lambda blocks: min(statistics.median(b) for b in blocks),
}


def blocks(count: int) -> list[float]:
    options, model, sets = build()
    return [statistics.median(b) for b in time_placements(options, model, sets, count, fresh_first=True)]


def rotation(names: list[str]) -> list[dict]:
    """egg's loop with and without input rotation, and do_bench, on suite references (eager)."""
    import torch
    import triton.testing

    from judge_h200 import build as build_reference  # this folder: the agreement bench builds references the same way

    from pipeline.judge import timing
    from pipeline.judge.probes import hold_fp32_to_fp32
    from pipeline.judge.worker import time_model
    from pipeline.types import EvalOptions

    options = EvalOptions()
    opts = dataclasses.asdict(options)
    hold_fp32_to_fp32()
    device = torch.device("cuda")
    rows = []
    for name in names:
        path = next((ROOT / "data" / "problems" / "suite").glob(f"level*/{name}.py"))
        model, sets = build_reference(str(path), device)
        buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
        flush = timing.L2Flush(options.l2_flush_bytes, device)
        row: dict = {"problem": name, "rotated": [], "in_place": [], "do_bench": []}
        with torch.no_grad():
            for _ in range(2):
                row["rotated"].append(statistics.median(time_model(model, buffers, sets, opts, flush).event_ms))
                samples = timing.time_calls(lambda: model(*buffers), lambda i: None, warmup=options.warmup, trials=options.timing_trials, flush=flush)
                row["in_place"].append(statistics.median(samples.event_ms))
                row["do_bench"].append(triton.testing.do_bench(lambda: model(*buffers), warmup=100, rep=500, return_mode="median"))
        print("rotation:", row, flush=True)
        rows.append(row)
        model = sets = buffers = None  # free the GiBs before the next problem
        torch.cuda.empty_cache()
    return rows


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--rotation", default="12_Sum_Dim1,13_Max_LastDim,14_Argmax_Dim1,10_BatchNorm2d_Train,5_GEMV",
                        help="suite references to time with and without input rotation ('' for none)")
    parser.add_argument("--placements", type=int, default=4, help="timing blocks per fresh process, each on new allocations")
    parser.add_argument("--move-output", action="store_true", help="each placement also moves the candidate's output buffer")
    parser.add_argument("--head-starts", default="", help="compare head starts (mode:ms, comma-separated) instead of placements, "
                        "e.g. fixed:0,fixed:1,until_launched:2 (a bare number is fixed)")
    parser.add_argument("--rounds", type=int, default=3, help="with --head-starts: blocks per head start in each process")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_process(args.placements, args.move_output, [v for v in args.head_starts.split(",") if v], args.rounds)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"command": " ".join(sys.argv), "candidate": str(CANDIDATE.relative_to(ROOT)), "problem": str(PROBLEM.relative_to(ROOT))}
    runs = []
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--one", "--placements", str(args.placements)] + (["--move-output"] if args.move_output else [])
                              + ["--head-starts", args.head_starts, "--rounds", str(args.rounds)], capture_output=True, text=True, check=False)
        if done.returncode:
            runs.append({"error": done.stderr[-1500:]})
        else:
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        shown = {k: v for k, v in runs[-1].items() if k not in ("blocks_ms", "head_start_blocks")}
        shown["head_start_medians"] = [(b["head_start"], round(statistics.median(b["event_ms"]), 4), round(statistics.median(b["launch_ms"]), 3))
                                       for b in runs[-1].get("head_start_blocks", [])]
        shown["block_medians"] = [round(statistics.median(b), 4) for b in runs[-1].get("blocks_ms", [])]
        print("process:", shown, flush=True)
    report["processes"] = [r.get("median_ms") for r in runs]
    pooled = [r["blocks_ms"] for r in runs if "blocks_ms" in r]
    report["estimators"] = {name: [round(f(b), 5) for b in pooled] for name, f in ESTIMATORS.items()}
    report["process_errors"] = [r["error"] for r in runs if "error" in r]
    report["runs"] = runs  # every trial of every block, and each block's output address and copy bandwidth
    args.out.joinpath("judge_variance.json").write_text(json.dumps(report, indent=1))  # kept if a later part is cut
    report["blocks"] = blocks(args.blocks)
    print("blocks:", report["blocks"], flush=True)
    report["rotation"] = rotation([n for n in args.rotation.split(",") if n])
    good = [v for v in report["processes"] if v]
    lines = ["# Spread of one candidate's median: fresh processes vs re-allocated buffers", "",
             f"Command: `{report['command']}`; candidate {report['candidate']} on {report['problem']}.", "",
             "| how | medians (ms) | spread (max-min)/median |", "|---|---|---|",
             f"| {len(good)} fresh processes | {[round(v, 4) for v in good]} | {spread(good):.2%} |",
             f"| {len(report['blocks'])} re-allocated blocks, one process | {[round(v, 4) for v in report['blocks']]} | {spread(report['blocks']):.2%} |"]
    if args.head_starts:
        lines += ["", f"Head start before each timed call (what the GPU runs after the L2 flush), {args.rounds} alternating blocks of each per process:", ""]
        lines += head_start_table(runs)
    elif args.placements > 1:
        lines += ["", f"Estimators over {args.placements} placements per process (spread across the {len(pooled)} processes):", "",
                  "| estimator | per process (ms) | spread |", "|---|---|---|"]
        lines += [f"| {name} | {values} | {spread(values):.2%} |" for name, values in report["estimators"].items()]
    if report["rotation"]:
        lines += ["", "| reference | egg loop, inputs rotated (ms) | egg loop, inputs in place | do_bench | rotated/do_bench | in place/do_bench |",
                  "|---|---|---|---|---|---|"]
        for r in report["rotation"]:
            rot, inp, db = (statistics.median(r[k]) for k in ("rotated", "in_place", "do_bench"))
            lines.append(f"| {r['problem']} | {[round(v, 4) for v in r['rotated']]} | {[round(v, 4) for v in r['in_place']]} | "
                         f"{[round(v, 4) for v in r['do_bench']]} | {rot / db:.4f} | {inp / db:.4f} |")
    (args.out / "judge_variance.json").write_text(json.dumps(report, indent=1))
    (args.out / "judge_variance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
