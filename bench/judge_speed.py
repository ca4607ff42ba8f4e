"""How long a verdict takes: the five example candidates on their suite problems, as a person runs `egg check`.

Run on the GPU machine from the repository root:
    PYTHONPATH=. python bench/judge_speed.py --out OUTDIR [--parts cold,repeat,judge] [--cache /tmp/egg-bench-cache]

Parts (each guarded: a failure is recorded and the next goes on; results are written after every step):
- cold: the first `egg check` of each candidate, each in a fresh process, with an empty cache (`--cache` is wiped
  first): the reference run, its baselines and every compile are part of it.
- repeat: `egg check` of each again, each in a fresh process: the problem has been seen, its reference comes from
  the cache (the acceptance: at most 12 s each, at most half of 105 s for the five).
- judge: all five through one long-lived `Judge` in this process, each twice in a row: the first finds its
  problem's reference facts on disk, the second in memory (its outputs are recomputed for every check's fresh
  inputs either way; acceptance: at most 3 s).
- harness: KernelBench's own harness (`eval_kernel_against_ref`, bench/kernelbench_harness.py) on the same five,
  each in a fresh process, with `--kernelbench DIR` naming a checkout of its repository (acceptance: the five
  repeat checks together in at most half the harness's time).
For every check: wall seconds (the process's, for cold and repeat), the judge's and the worker's seconds per phase,
the status, the candidate's median and the baselines; and the medians of the cold (uncached) run against the repeat
and long-lived ones, so "timings unchanged within 2%" can be read off.

`egg check` runs through the CLI when typer and rich import here, else through a driver doing what the CLI's
check does (start the worker server, then import torch, then judge); the JSON says which.
Writes OUTDIR/judge_speed.json (every number) and OUTDIR/judge_speed.md (the tables). Imports: the standard
library, torch and egg's judge (no pydantic, typer or rich needed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "candidates"
CHECK_LIMITS = {"repeat_s": 12.0, "repeat_total_s": 105.0 / 2, "judge_s": 3.0, "timing_ratio": 0.02}

DRIVER = """
import json, os, sys
from pipeline.judge.sandbox import WorkerPool
pool = WorkerPool(sys.argv[3])
pool.start_server()  # as `egg check` does: the worker server's imports overlap this process's own
from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, to_jsonable
with Judge(EvalOptions(device=sys.argv[3]), pool=pool) as judge:
    result = judge.evaluate(load_problem(sys.argv[2]), load_candidate(sys.argv[1]))
sys.stdout.write(json.dumps(to_jsonable(result)) + "\\n")
sys.stdout.flush()
os._exit(0)  # as egg check does: the verdict is out, torch's and CUDA's teardown is skipped
"""


def example_pairs(size: str = "suite") -> list[tuple[Path, Path]]:
    """(candidate, problem) for each example: the candidate's header names its tiny problem; `size` "suite" takes
    the full-size twin."""
    pairs = []
    for cand in sorted(EXAMPLES.glob("*.py")):
        head = cand.read_text().splitlines()[:5]
        tiny = next((w for line in head for w in line.replace(",", " ").split() if w.startswith("data/problems/tiny/")), None)
        if tiny:
            path = ROOT / tiny.rstrip(".:").replace("data/problems/tiny/", f"data/problems/{size}/")
            if path.exists():
                pairs.append((cand, path))
    return pairs


def cli_available() -> bool:
    """Whether `egg check` itself can run here (the CLI needs typer and rich, which the GPU machine may lack)."""
    probe = subprocess.run([sys.executable, "-c", "import typer, rich, pipeline.cli"], capture_output=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)))
    return probe.returncode == 0


def summary(result: dict) -> dict:
    """The numbers of one verdict that the tables use."""
    timing = result.get("timing") or {}
    return {
        "status": result.get("status"),
        "reason": (result.get("reason") or "")[:300],
        "median_ms": timing.get("median_ms"),
        "ci95_ms": [timing.get("ci95_low_ms"), timing.get("ci95_high_ms")] if timing else None,
        "baselines_ms": {k: v.get("median_ms") for k, v in (result.get("baselines") or {}).items()},
        "speedups": result.get("speedups"),
        "duration_s": result.get("duration_s"),
        "judge_phase_s": result.get("judge_phase_s"),
        "cli_s": result.get("cli_s"),  # `egg check`'s own marks, seconds since its process started
        "phase_s": result.get("phase_s"),
        "reference_source": result.get("reference_source"),
        "isolation": (result.get("environment") or {}).get("isolation"),
        "isolation_missing": (result.get("environment") or {}).get("isolation_missing"),
        "output_transport": (result.get("environment") or {}).get("output_transport"),
        "log_tail": (result.get("log_tail") or "")[-1500:] if result.get("status") != "ok" else "",
    }


def check_in_fresh_process(cand: Path, prob: Path, env: dict, use_cli: bool, timeout_s: float, device: str) -> dict:
    """One `egg check --json` in a new process; the process's wall seconds beside the verdict's own numbers."""
    if use_cli:
        command = [sys.executable, "-m", "pipeline.cli", "check", str(cand), "--ref", str(prob), "--device", device, "--json"]
    else:
        command = [sys.executable, "-c", DRIVER, str(cand), str(prob), device]
    t0 = time.monotonic()
    try:
        run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s} s", "wall_s": round(time.monotonic() - t0, 2)}
    wall = round(time.monotonic() - t0, 2)
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    try:
        result = json.loads("\n".join(lines)) if use_cli else json.loads(lines[-1])
    except (ValueError, IndexError):
        return {"error": f"no verdict (exit {run.returncode})", "stderr": run.stderr[-3000:], "wall_s": wall}
    return {"wall_s": wall, "exit": run.returncode, "stderr_tail": run.stderr[-800:], **summary(result)}


class Report:
    def __init__(self, out: Path, meta: dict) -> None:
        self.out, self.data = out, {"meta": meta, "cold": [], "repeat": [], "judge": [], "harness": [], "errors": []}

    def log(self, message: str) -> None:
        print(message, flush=True)
        with open(self.out / "judge_speed.log", "a") as f:
            f.write(message + "\n")

    def save(self) -> None:
        (self.out / "judge_speed.json").write_text(json.dumps(self.data, indent=1))
        (self.out / "judge_speed.md").write_text(markdown(self.data))


def fresh_process_part(name: str, pairs, env, use_cli, timeout_s, device: str, report: Report) -> None:
    for cand, prob in pairs:
        row = {"candidate": cand.name, "problem": prob.stem}
        try:
            row.update(check_in_fresh_process(cand, prob, env, use_cli, timeout_s, device))
        except Exception as exc:  # keep going: one broken step must not lose the rest
            row["error"] = f"{type(exc).__name__}: {exc}"
        report.data[name].append(row)
        report.log(f"{name} {cand.name} on {prob.stem}: {row.get('status', row.get('error'))} in {row.get('wall_s')} s wall "
                   f"(verdict {row.get('duration_s')} s; reference {row.get('reference_source')}); median {row.get('median_ms')} ms")
        report.save()


def harness_part(pairs, kernelbench: Path, env: dict, timeout_s: float, report: Report) -> None:
    """KernelBench's own harness on each pair, each in a fresh process, as its scripts run one evaluation."""
    for cand, prob in pairs:
        row = {"candidate": cand.name, "problem": prob.stem}
        command = [sys.executable, str(ROOT / "bench" / "kernelbench_harness.py"), "--kernelbench", str(kernelbench),
                   "--candidate", str(cand), "--problem", str(prob)]
        t0 = time.monotonic()
        try:
            run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
            row["wall_s"] = round(time.monotonic() - t0, 2)
            data = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
            result = data["result"]
            row.update(correct=result.get("correctness"), runtime_ms=result.get("runtime"), stood_in=data.get("stood_in"),
                       process_s=data.get("process_s"))
        except Exception as exc:  # keep going: one broken step must not lose the rest
            row.setdefault("wall_s", round(time.monotonic() - t0, 2))
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["stderr"] = (locals().get("run").stderr[-2000:] if locals().get("run") is not None else "")
        report.data["harness"].append(row)
        report.log(f"harness {cand.name} on {prob.stem}: correct={row.get('correct')} in {row.get('wall_s')} s wall; "
                   f"runtime {row.get('runtime_ms')} ms {row.get('error', '')}")
        report.save()


def long_lived_part(pairs, cache: Path, device: str, report: Report) -> None:
    """All candidates through one Judge, twice each (reference first from disk, then from memory)."""
    os.environ["EGG_CACHE"] = str(cache)
    from pipeline.judge import Judge
    from pipeline.problems.loader import load_candidate, load_problem
    from pipeline.types import EvalOptions, to_jsonable

    t0 = time.monotonic()
    with Judge(EvalOptions(device=device)) as judge:
        report.data["judge_start_s"] = round(time.monotonic() - t0, 2)
        for cand, prob in pairs:
            for round_ in (1, 2):
                row = {"candidate": cand.name, "problem": prob.stem, "round": round_}
                try:
                    t1 = time.monotonic()
                    result = to_jsonable(judge.evaluate(load_problem(prob), load_candidate(cand)))
                    row.update(wall_s=round(time.monotonic() - t1, 2), **summary(result))
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    row["traceback"] = traceback.format_exc()[-2000:]
                report.data["judge"].append(row)
                report.log(f"judge round {round_} {cand.name}: {row.get('status', row.get('error'))} in {row.get('wall_s')} s "
                           f"(reference {row.get('reference_source')}); median {row.get('median_ms')} ms")
                report.save()


def _phases(row: dict) -> str:
    phases = {k: v for k, v in (row.get("judge_phase_s") or {}).items() if k != "total"}
    # every phase of a tenth of a second or more, in the judge's order: its own laps, the reference worker's (ref.w.)
    # and the candidate worker's (w.)
    text = " ".join(f"{k.replace('reference_worker_', 'ref.w.').replace('worker_', 'w.')}={v:.2f}" for k, v in phases.items()
                    if isinstance(v, (int, float)) and v >= 0.1)
    marks = row.get("cli_s") or {}
    if any(isinstance(v, (int, float)) for v in marks.values()):  # where the process's time went before the verdict
        text += " · process at " + " ".join(f"{k}={v:.2f}" for k, v in marks.items() if isinstance(v, (int, float)))
    return text


def markdown(data: dict) -> str:
    meta = data["meta"]
    lines = ["# egg check on the H200: first check, repeat check, one long-lived Judge", "",
             f"Command: `{meta.get('command')}`; through {meta.get('through')}; environment: {json.dumps(meta.get('environment', {}))}", ""]
    for part, title in (("cold", "First check (empty cache), each in a fresh process"), ("repeat", "Repeat check (problem seen before), each in a fresh process")):
        rows = data[part]
        if not rows:
            continue
        lines += [f"## {title}", "", "| candidate | problem | status | wall s | verdict s | reference | median ms | phases (s) |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['candidate']} | {r['problem']} | {r.get('status', r.get('error'))} | {r.get('wall_s')} | {r.get('duration_s')} | "
                         f"{r.get('reference_source')} | {r.get('median_ms')} | {_phases(r)} |")
        walls = [r["wall_s"] for r in rows if r.get("status") == "ok"]
        if walls:
            lines += ["", f"Total wall: {sum(walls):.1f} s for {len(walls)} checks; slowest {max(walls):.1f} s."]
        lines.append("")
    if data["judge"]:
        lines += [f"## One long-lived Judge (started in {data.get('judge_start_s')} s)", "",
                  "| round | candidate | status | wall s | reference | median ms | phases (s) |", "|---|---|---|---|---|---|---|"]
        for r in data["judge"]:
            lines.append(f"| {r['round']} | {r['candidate']} | {r.get('status', r.get('error'))} | {r.get('wall_s')} | {r.get('reference_source')} | "
                         f"{r.get('median_ms')} | {_phases(r)} |")
        lines.append("")
    if data["harness"]:
        lines += ["## KernelBench's own harness (eval_kernel_against_ref), each in a fresh process", "",
                  "| candidate | problem | correct | wall s | runtime ms |", "|---|---|---|---|---|"]
        for r in data["harness"]:
            lines.append(f"| {r['candidate']} | {r['problem']} | {r.get('correct', r.get('error'))} | {r.get('wall_s')} | {r.get('runtime_ms')} |")
        lines.append("")
    lines += agreement_lines(data)
    lines += acceptance_lines(data)
    return "\n".join(lines) + "\n"


def agreement_lines(data: dict) -> list[str]:
    """The candidate's median through the cached paths against the uncached (cold) one."""
    cold = {r["candidate"]: r for r in data["cold"] if r.get("median_ms")}
    if not cold:
        return []
    lines = ["## Timings: cached paths against the uncached one", "",
             "| candidate | cold median ms | repeat median ms | repeat/cold | judge (memory) median ms | judge/cold | eager baseline cold / repeat |",
             "|---|---|---|---|---|---|---|"]
    for name, c in cold.items():
        rep = next((r for r in data["repeat"] if r["candidate"] == name and r.get("median_ms")), {})
        jud = next((r for r in data["judge"] if r["candidate"] == name and r.get("round") == 2 and r.get("median_ms")), {})
        ratio = lambda r: f"{r['median_ms'] / c['median_ms']:.4f}" if r.get("median_ms") else "-"
        eager = f"{c['baselines_ms'].get('eager')} / {rep.get('baselines_ms', {}).get('eager', '-')}"
        lines.append(f"| {name} | {c['median_ms']:.5g} | {rep.get('median_ms', '-')} | {ratio(rep)} | {jud.get('median_ms', '-')} | {ratio(jud)} | {eager} |")
    return lines + [""]


def acceptance_lines(data: dict) -> list[str]:
    lines = ["## Against the issue's acceptance", ""]
    rep = [r for r in data["repeat"] if r.get("status") == "ok"]
    harness = [r["wall_s"] for r in data.get("harness", []) if r.get("wall_s") is not None and "error" not in r]
    limit = sum(harness) / 2 if len(harness) == len(data.get("harness", [])) and harness else CHECK_LIMITS["repeat_total_s"]
    if rep:
        walls = [r["wall_s"] for r in rep]
        source = "half of KernelBench's harness in this run" if harness else "half of the 105 s KernelBench's harness took in session 6"
        lines.append(f"- repeat `egg check`: slowest {max(walls):.1f} s (limit {CHECK_LIMITS['repeat_s']:g}); five together {sum(walls):.1f} s "
                     f"(limit {limit:.1f} s, {source}); {len(rep)} of {len(data['repeat'])} ok")
        unseen = [r["candidate"] for r in rep if r.get("reference_source") == "computed"]
        if unseen:  # then these were first checks, not repeats: said, so the figure is not read as a repeat's
            lines.append(f"- NOT a repeat for {', '.join(unseen)}: the reference was computed, not read from the cache")
    if harness:
        lines.append(f"- KernelBench's harness on the same five: {sum(harness):.1f} s together, slowest {max(harness):.1f} s")
    mem = [r for r in data["judge"] if r.get("round") == 2 and r.get("status") == "ok"]
    if mem:
        lines.append(f"- one long-lived Judge, reference in memory: slowest {max(r['wall_s'] for r in mem):.1f} s per candidate "
                     f"(limit {CHECK_LIMITS['judge_s']:g}); mean {statistics.fmean(r['wall_s'] for r in mem):.1f} s")
    disk = [r for r in data["judge"] if r.get("round") == 1 and r.get("status") == "ok"]
    if disk:  # the first job of the Judge's life also waits for its worker server's imports: said, not hidden
        first, rest = disk[0], disk[1:]
        server = (first.get("judge_phase_s") or {}).get("worker_server", 0.0)
        lines.append(f"- one long-lived Judge, reference from disk: the Judge's first candidate {first['wall_s']:.1f} s, of which "
                     f"{server:.1f} s waiting for its worker server to start"
                     + (f"; the others slowest {max(r['wall_s'] for r in rest):.1f} s" if rest else ""))
    return lines + [""]


def environment() -> dict:
    try:
        import torch
        import triton

        return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "torch": torch.__version__, "triton": triton.__version__,
                "python": sys.version.split()[0]}
    except Exception as exc:
        return {"error": str(exc)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--parts", default="cold,repeat,judge")
    parser.add_argument("--cache", default="/tmp/egg-bench-cache", help="EGG_CACHE for every check (wiped before the cold part)")
    parser.add_argument("--only", default="", help="candidates (file names), comma-separated")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="per fresh-process check")
    parser.add_argument("--device", default="cuda", help="cuda; cpu (with --problems tiny) only to try the script itself")
    parser.add_argument("--problems", default="suite", choices=("suite", "tiny"))
    parser.add_argument("--kernelbench", default="", help="a checkout of KernelBench's repository (the harness part)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = [p for p in args.parts.split(",") if p]
    pairs = [(c, p) for c, p in example_pairs(args.problems) if not args.only or c.name in args.only.split(",")]
    cache = Path(args.cache)
    use_cli = cli_available()
    report = Report(out, {"command": " ".join(sys.argv), "through": "the egg CLI" if use_cli else "a driver doing what egg check does (no typer/rich here)",
                          "pairs": [[c.name, p.stem] for c, p in pairs], "cache": str(cache), "environment": environment()})
    report.log(f"judge_speed: {len(pairs)} pairs, parts {parts}, through {report.data['meta']['through']}")
    env = dict(os.environ, EGG_CACHE=str(cache), PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    for part in parts:
        t0 = time.monotonic()
        try:
            if part == "cold":
                shutil.rmtree(cache, ignore_errors=True)
                fresh_process_part("cold", pairs, env, use_cli, args.timeout_s, args.device, report)
            elif part == "repeat":
                if "cold" not in parts[: parts.index("repeat")]:  # a repeat needs the problems seen: see them first, unrecorded
                    report.data.setdefault("warmup", [])
                    fresh_process_part("warmup", pairs, env, use_cli, args.timeout_s, args.device, report)
                fresh_process_part("repeat", pairs, env, use_cli, args.timeout_s, args.device, report)
            elif part == "judge":
                long_lived_part(pairs, cache, args.device, report)
            elif part == "harness":
                harness_part(pairs, Path(args.kernelbench), env, args.timeout_s, report)
            else:
                report.data["errors"].append(f"unknown part {part}")
        except Exception as exc:
            report.data["errors"].append(f"{part}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}")
        report.data.setdefault("part_s", {})[part] = round(time.monotonic() - t0, 1)
        report.save()
        report.log(f"part {part} done in {report.data['part_s'][part]} s")
    print(markdown(report.data))


if __name__ == "__main__":
    main()
