"""Measures the judge on a CUDA GPU: agreement with triton.testing.do_bench, repeatability, overhead, throughput.

Run on the GPU machine from the repository root:
    PYTHONPATH=. python bench/judge_h200.py --out OUTDIR [--quick] [--part agreement] [--head-start until_launched:2]
It writes OUTDIR/judge_h200.json (every number) and OUTDIR/judge_h200.md (the tables); both are committed under
bench/results/ with the command that made them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton.testing

from pipeline.judge.judge import Judge, _seeds
from pipeline.judge.probes import hold_fp32_to_fp32
from pipeline.judge import timing
from pipeline.judge.worker import load_module, make_inputs, time_model
from pipeline.problems.loader import load_candidate, load_problem, load_suite
from pipeline.types import EvalOptions, to_jsonable

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "data" / "problems" / "suite"
EXAMPLES = ROOT / "examples" / "candidates"
OPTIONS = EvalOptions()  # the judge's defaults: warm-up, trials, timed input sets, L2 flush size
SEED = OPTIONS.seed


def build(problem_path: str, device: torch.device):
    """The problem's model and its first timed input set, exactly as the judge's reference worker makes them."""
    module = load_module(problem_path, "bench_problem")
    torch.manual_seed(SEED)
    init = module.get_init_inputs()
    torch.manual_seed(SEED)
    model = module.Model(*init).to(device)
    timed = [{"name": f"timed_{k}", "seed": s} for k, s in enumerate(_seeds(SEED, OPTIONS.timed_input_sets, "timed"))]
    sets = [make_inputs(module.get_inputs, spec, device) for spec in timed]
    return model, sets


def egg_eager_ms(model, sets, head_start: str | None = None, warmup_ms: float | None = None) -> dict:
    """egg's timing of the eager model: the worker's own `time_model` (rotated input sets, queued L2 flush, the
    head start of OPTIONS unless another is given as "mode:ms"), with the host's median launch time per call, the
    trials whose head start ran out, and the wall-clock window it ran in (to read the GPU's clocks against)."""
    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
    flush = timing.L2Flush(OPTIONS.l2_flush_bytes, torch.device("cuda"))
    opts = dataclasses.asdict(OPTIONS)
    if head_start is not None:
        opts["head_start_mode"], opts["head_start_ms"] = timing.parse_head_start(head_start)
    if warmup_ms is not None:
        opts["warmup_ms"] = warmup_ms
    t0 = time.time()
    with torch.no_grad():
        samples = time_model(model, buffers, sets, opts, flush)
    return {**timing.summarize(samples.event_ms, samples.method), "launch_ms": statistics.median(samples.launch_ms),
            "capped": samples.head_start_capped, "window": [t0, time.time()]}


def do_bench_ms(model, sets) -> float:
    """triton.testing.do_bench (median) of the same model on the same first input set."""
    with torch.no_grad():
        return triton.testing.do_bench(lambda: model(*sets[0]), warmup=100, rep=500, return_mode="median")


def agreement(problems, log, save, cross_check: int | set[str], also: list[str], rounds: int = 2) -> list[dict]:
    """egg's eager timing of each suite reference against do_bench's, in one process, on the same model and inputs.

    Both take the timing function the judge's reference worker uses. `rounds` pairs of the two alternate which runs
    first (egg, do_bench, do_bench, egg, ...), and each side's figure is the median over its rounds: a power-limited
    GPU runs faster after rest, so a fixed order favours whichever goes first. Each head start of `also`
    ("mode:ms") is timed too, after the rest. The first `cross_check` problems (or those named) are also timed
    through the whole sandboxed judge (a fresh worker), to show the in-process figure is the judge's."""
    rows = []
    hold_fp32_to_fp32()  # as every worker does: cuDNN and cuBLAS TF32 off
    device = torch.device("cuda")
    for problem in problems:
        start = time.monotonic()
        try:
            model, sets = build(problem.path, device)
            eggs, benches = [], []
            for r in range(rounds):
                if r % 2 == 0:
                    eggs.append(egg_eager_ms(model, sets))
                t_bench = time.time()
                benches.append({"median_ms": do_bench_ms(model, sets), "window": [t_bench, time.time()]})
                if r % 2 == 1:
                    eggs.append(egg_eager_ms(model, sets))
            others = {spec: egg_eager_ms(model, sets, spec) for spec in also}
        except Exception as exc:  # keep going: one broken problem must not lose the rest
            rows.append({"problem": problem.name, "level": problem.level, "error": f"{type(exc).__name__}: {exc}"[:500]})
            log(f"{problem.name}: failed: {exc}")
            continue
        finally:
            model = sets = None
            torch.cuda.empty_cache()
        egg_ms = statistics.median(e["median_ms"] for e in eggs)
        bench = statistics.median(b["median_ms"] for b in benches)
        egg, again = eggs[0], eggs[1] if len(eggs) > 1 else eggs[0]
        row = {
            "problem": problem.name,
            "level": problem.level,
            "egg_eager_median_ms": round(egg_ms, 4),
            "egg_ci95_ms": [round(egg["ci95_low_ms"], 4), round(egg["ci95_high_ms"], 4)],
            "egg_again_median_ms": round(again["median_ms"], 4),
            "do_bench_median_ms": round(bench, 4),
            "egg_rounds_ms": [round(e["median_ms"], 4) for e in eggs],
            "do_bench_rounds_ms": [round(b["median_ms"], 4) for b in benches],
            "ratio": round(egg_ms / bench, 4),
            "ratio_again": round(again["median_ms"] / bench, 4),
            "host_launch_ms": round(egg["launch_ms"], 4),
            "capped": egg["capped"],
            "by_head_start": {spec: {"median_ms": round(o["median_ms"], 4), "ratio": round(o["median_ms"] / bench, 4), "capped": o["capped"],
                                     "window": o["window"]} for spec, o in others.items()},
            "windows": {"egg": egg["window"], "do_bench": benches[0]["window"], "egg_again": again["window"]},
            "in_1_15_ms": 1.0 <= egg_ms <= 15.0,
            "wall_s": round(time.monotonic() - start, 2),
        }
        if "fixed:0" in others:  # do_bench's way: launched right after the flush
            row["ratio_no_head_start"] = row["by_head_start"]["fixed:0"]["ratio"]
        rows.append(row)
        save(rows)
        log(f"{problem.level}/{problem.name}: egg {row['egg_rounds_ms']} ms, do_bench {row['do_bench_rounds_ms']} ms, "
            f"ratio of medians {row['ratio']:.3f}")
    by_name = {row["problem"]: row for row in rows}
    checked = [p for p in problems if p.name in cross_check] if isinstance(cross_check, set) else problems[:cross_check]
    if checked:
        options = dataclasses.replace(OPTIONS, device="cuda", baselines=("eager",), correctness_trials=1, signed_trial=False)
        with Judge(options) as judge:
            for problem in checked:
                row = by_name[problem.name]
                start = time.monotonic()
                try:
                    ref = judge.reference(problem)
                except Exception as exc:
                    row["judge_error"] = str(exc)[:300]
                    continue
                row["judge_eager_median_ms"] = round(ref.result["baselines"]["eager"]["median_ms"], 4)
                row["judge_reference_s"] = round(time.monotonic() - start, 2)
                judge._references.clear()  # free the kept outputs
                save(rows)
                log(f"{problem.name}: sandboxed judge {row['judge_eager_median_ms']} ms in {row['judge_reference_s']} s "
                    f"(in-process {row.get('egg_eager_median_ms')}, do_bench {row.get('do_bench_median_ms')})")
    return rows


def example_pairs() -> list[tuple[Path, Path]]:
    """(candidate, suite problem) for each example: the candidate's header names its tiny problem."""
    pairs = []
    for cand in sorted(EXAMPLES.glob("*.py")):
        head = cand.read_text().splitlines()[:5]
        tiny = next((w for line in head for w in line.replace(",", " ").split() if w.startswith("data/problems/tiny/")), None)
        if tiny:
            suite = ROOT / tiny.replace("data/problems/tiny/", "data/problems/suite/").rstrip(".:")
            if suite.exists():
                pairs.append((cand, suite))
    return pairs


def repeats_only(repeats: int, log, save=lambda out: None, reference_repeats: tuple[str, ...] = ()) -> dict:
    """One candidate (the softmax example on its full-size problem) judged `repeats` times in fresh workers; then
    each named suite reference's baselines timed `repeats` times, each in a fresh reference worker."""
    out = {"examples": [], "repeats": []}
    with Judge(dataclasses.replace(OPTIONS, device="cuda")) as judge:
        problem = load_problem(SUITE / "level1" / "23_Softmax.py")
        t0 = time.monotonic()
        judge.reference(problem)
        out["reference_s"] = round(time.monotonic() - t0, 2)
        for i in range(repeats):
            result = judge.evaluate(problem, load_candidate(EXAMPLES / "softmax_triton.py"))
            out["repeats"].append({"status": result.status.value, "median_ms": result.timing.median_ms if result.timing else None,
                                   "speedups": result.speedups, "duration_s": result.duration_s, "phase_s": result.phase_s})
            log(f"repeat {i + 1}: {result.status.value} median {out['repeats'][-1]['median_ms']} in {result.duration_s} s; phases {result.phase_s}")
            save(out)
        out["reference_repeats"] = []
        for name in reference_repeats:
            problem = load_problem(next(SUITE.glob(f"level*/{name}.py")))
            for i in range(repeats):
                judge._references.clear()  # a fresh reference worker each time
                ref = judge.reference(problem)
                baselines = ref.result["baselines"]
                out["reference_repeats"].append({"problem": name, **{f"{k}_median_ms": v["median_ms"] for k, v in baselines.items()}})
                log(f"{name} reference {i + 1}: " + ", ".join(f"{k} {v['median_ms']:.4f} ms" for k, v in baselines.items()))
                save(out)
    return out


def examples_and_repeats(repeats: int, log) -> dict:
    """Every example candidate judged on its full-size problem; the first judged `repeats` times more."""
    out = {"examples": [], "repeats": []}
    with Judge(dataclasses.replace(OPTIONS, device="cuda")) as judge:
        pairs = example_pairs()
        for cand, prob in pairs:
            problem = load_problem(prob)
            t0 = time.monotonic()
            judge.reference(problem)
            ref_s = time.monotonic() - t0
            result = judge.evaluate(problem, load_candidate(cand))
            out["examples"].append({"candidate": cand.name, "problem": problem.name, "reference_s": round(ref_s, 2), "result": to_jsonable(result)})
            log(f"{cand.name} on {problem.name}: {result.status.value} {result.reason} speedups {result.speedups} in {result.duration_s:.1f} s")
        if pairs:
            cand, prob = pairs[0]
            problem = load_problem(prob)
            for i in range(repeats):
                result = judge.evaluate(problem, load_candidate(cand))
                out["repeats"].append({"status": result.status.value, "median_ms": result.timing.median_ms if result.timing else None, "duration_s": result.duration_s, "phase_s": result.phase_s})
                log(f"repeat {i + 1}: {result.status.value} median {out['repeats'][-1]['median_ms']}")
    return out


def start_clock_log(path: Path):
    """nvidia-smi sampling this process's GPU's SM clock and power every 50 ms into `path`; None without nvidia-smi."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                 "-lms", "50", "-i", gpu], stdout=open(path, "w"), stderr=subprocess.DEVNULL)
    except OSError:
        return None


def read_clocks(path: Path) -> list[tuple[float, float, float]]:
    """(unix time, SM clock MHz, power W) per sample of `nvidia-smi -lms` (csv,noheader,nounits), if it ran."""
    samples = []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((stamp, float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue
    return samples


def clock_in(samples, window) -> str:
    """Mean SM MHz / W of the samples inside a timing loop's window, '-' without samples."""
    inside = [(mhz, w) for t, mhz, w in samples if window and window[0] <= t <= window[1]]
    if not inside:
        return "-"
    return f"{statistics.fmean(m for m, _ in inside):.0f}/{statistics.fmean(w for _, w in inside):.0f}"


def summarize(report: dict, clocks: list | None = None) -> str:
    lines = ["# The judge on the H200", "", f"Environment: {json.dumps(report['environment'])}", ""]
    rows = [r for r in report["agreement"] if "ratio" in r]
    also = list(rows[0].get("by_head_start", {})) if rows else []
    primary = report.get("head_start", "")
    lines += ["## Eager reference: egg's timing vs triton.testing.do_bench (median)", "",
              f"egg's timing is the reference worker's own function (rotated input sets, queued L2 flush), run in the bench's",
              f"process with the head start {primary}. egg and do_bench are timed in pairs that alternate which goes first;",
              "each median is the median over its rounds, the CI is the first round's ('egg_rounds_ms' and 'do_bench_rounds_ms'",
              "in the JSON); 'again' is egg's second round, run after do_bench; 'judge' is the whole sandboxed",
              "reference run (fresh worker); each further ratio column is egg's loop with another head start (fixed:0 launches",
              "right after the L2 flush, as do_bench does); 'launch' is the host's median time for one call to return;",
              "'capped' counts trials whose until_launched wait ran out. 'MHz/W' is the GPU's mean SM clock and power",
              "(nvidia-smi every 50 ms) while egg's loop, do_bench, and the other head starts ran.", ""]
    head = ["problem", "egg median ms", "egg 95% CI", "egg again", "judge", "do_bench median ms", "egg/do_bench", "again/do_bench"]
    head += [f"{spec}/do_bench" for spec in also] + ["launch ms", "capped", "1-15 ms"]
    if clocks:
        head += ["MHz/W egg", "MHz/W do_bench"] + [f"MHz/W {spec}" for spec in also]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['level']}/{r['problem']}", r["egg_eager_median_ms"], r["egg_ci95_ms"], r["egg_again_median_ms"],
                 r.get("judge_eager_median_ms", "-"), r["do_bench_median_ms"], r["ratio"], r["ratio_again"]]
        cells += [r["by_head_start"][spec]["ratio"] if spec in r.get("by_head_start", {}) else "-" for spec in also]
        cells += [r.get("host_launch_ms", "-"), r.get("capped", "-"), "yes" if r["in_1_15_ms"] else "NO"]
        if clocks:
            windows = r.get("windows", {})
            cells += [clock_in(clocks, windows.get("egg")), clock_in(clocks, windows.get("do_bench"))]
            cells += [clock_in(clocks, r["by_head_start"].get(spec, {}).get("window")) for spec in also]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    for r in report["agreement"]:
        if "error" in r:
            lines.append(f"| {r['level']}/{r['problem']} | failed: {r['error'][:80]} | | | | |")
    if rows:
        def within(name: str, ratios: list[float]) -> str:
            off = [x for x in ratios if abs(x - 1) > 0.05]
            return f"{name}: within 5%: {len(ratios) - len(off)} of {len(ratios)}; worst ratio {max(ratios, key=lambda x: abs(x - 1))}."

        lines += ["", within(f"egg ({primary})", [r["ratio"] for r in rows])]
        for spec in also:
            lines.append(within(spec, [r["by_head_start"][spec]["ratio"] for r in rows if spec in r.get("by_head_start", {})]))
    lines += ["", "## Example candidates on their full-size problems", "", "| candidate | problem | status | median ms | speedup vs eager | vs compile | eval s |", "|---|---|---|---|---|---|---|"]
    for e in report["examples"]["examples"]:
        res = e["result"]
        med = res["timing"]["median_ms"] if res["timing"] else "-"
        lines.append(f"| {e['candidate']} | {e['problem']} | {res['status']} | {med} | {res['speedups'].get('eager', '-')} | {res['speedups'].get('compile', '-')} | {res['duration_s']} |")
    reps = [r["median_ms"] for r in report["examples"]["repeats"] if r["median_ms"]]
    if reps:
        spread = (max(reps) - min(reps)) / statistics.median(reps)
        lines += ["", f"## Repeatability: {len(reps)} fresh-process evaluations of one candidate", "",
                  f"medians (ms): {reps}; spread (max-min)/median = {spread:.2%}"]
        durations = [r["duration_s"] for r in report["examples"]["repeats"]]
        lines += ["", "## Overhead and throughput (reference cached, candidate in a fresh worker each time)", "",
                  f"mean evaluation {statistics.fmean(durations):.2f} s per candidate = {60 / statistics.fmean(durations):.1f} candidates per minute",
                  f"phases of the last one (s): {report['examples']['repeats'][-1]['phase_s']}"]
    refs = report["examples"].get("reference_repeats", [])
    for name in dict.fromkeys(r["problem"] for r in refs):
        for key in [k for k in refs[0] if k.endswith("_median_ms")]:
            values = [r[key] for r in refs if r["problem"] == name and key in r]
            if values:
                spread = (max(values) - min(values)) / statistics.median(values)
                lines += ["", f"Reference {name}, {key[:-len('_median_ms')]} baseline, {len(values)} fresh reference workers: "
                              f"{[round(v, 4) for v in values]} ms; spread {spread:.2%}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    global OPTIONS
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help="3 problems, 2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cross-check", default="4", help="problems also timed through the sandboxed judge: the first N, or names, comma-separated")
    parser.add_argument("--part", choices=("all", "agreement", "examples", "repeats"), default="all")
    parser.add_argument("--head-start", default=f"{OPTIONS.head_start_mode}:{OPTIONS.head_start_ms:g}",
                        help="egg's head start, mode:ms (fixed:1, until_launched:2): the agreement's main columns and the repeats' judge")
    parser.add_argument("--reference-repeats", default="", help="repeats: suite references whose baselines are also timed --repeats times in fresh workers")
    parser.add_argument("--only", default="", help="agreement: these suite references only (names, comma-separated)")
    parser.add_argument("--rounds", type=int, default=2, help="agreement: pairs of egg and do_bench per reference, alternating which goes first")
    parser.add_argument("--also", default="fixed:0", help="more head starts the agreement times each reference with, comma-separated ('' for none)")
    args = parser.parse_args()
    mode, ms = timing.parse_head_start(args.head_start)
    OPTIONS = dataclasses.replace(OPTIONS, head_start_mode=mode, head_start_ms=ms)
    also = [spec for spec in args.also.split(",") if spec]
    cross_check = int(args.cross_check) if args.cross_check.isdigit() else {n for n in args.cross_check.split(",") if n}
    for spec in also:
        timing.parse_head_start(spec)  # refuse a bad spec before the long run
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / f"judge_h200_{args.part}.log", "w")

    def log(message: str) -> None:
        print(message, flush=True)
        log_file.write(message + "\n")
        log_file.flush()

    problems = load_suite(SUITE)
    if args.only:
        problems = [p for p in problems if p.name in args.only.split(",")]
    if args.quick:
        problems = problems[:3]
    report = {"command": " ".join(sys.argv), "environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}}
    name = "judge_h200" if args.part == "all" else f"judge_h200_{args.part}"

    def save(rows):  # after every problem, so a run cut short keeps what it measured
        (out / f"{name}.partial.json").write_text(json.dumps(rows, indent=1))

    report["head_start"] = f"{OPTIONS.head_start_mode}:{OPTIONS.head_start_ms:g}"
    clocks_path = out / "clocks.csv"
    smi = start_clock_log(clocks_path) if args.part in ("all", "agreement") else None
    try:
        report["agreement"] = agreement(problems, log, save, cross_check, also, args.rounds) if args.part in ("all", "agreement") else []
    finally:
        if smi is not None:
            smi.terminate()
    clocks = read_clocks(clocks_path)
    report["examples"] = {"examples": [], "repeats": []}
    if args.part in ("all", "examples"):
        report["examples"] = examples_and_repeats(2 if args.quick else args.repeats, log)
    elif args.part == "repeats":
        report["examples"] = repeats_only(args.repeats, log, save, tuple(n for n in args.reference_repeats.split(",") if n))
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (out / f"{name}.md").write_text(summarize(report, clocks))
    print(summarize(report, clocks))


if __name__ == "__main__":
    main()
