"""Issue 16's H200 experiment: the expert backend (no model) on every problem of data/problems/suite, unattended,
every candidate judged in full; correctness and speedups over eager and torch.compile (default mode) per problem
and as geomeans per level.

Run on the GPU machine from the repository root (see bench/README.md for the wheels; the `seeds` mode imports
torch, triton, numpy and egg's judge and expert modules only):
    PYTHONPATH=. python bench/expert_h200.py --out $OUT --deadline-s 540

Modes:
- `seeds` (default; the reduced but honest mode): per problem one reference run (eager and torch.compile timed by
  the judge), then the expert's stage-1 seeds (--seeds, default 3) and, where an exact rewrite applies, the
  transformed seed, each judged with every check; the fastest passing one is egg's answer. Stage 2 (profiling,
  structural variants, tuning) is not run, and the winner is not re-verified on a held-out seed (each candidate's
  own verdict already has the signed and hidden trials): that would double the reference runs.
- `optimize`: `egg optimize` itself per problem (pipeline.api.optimize with the expert backend, stage 2 and
  the held-out re-verification included), budgeted by --per-problem-s; costs 3-6x the seeds mode.
egg never ends worse than the reference: where no candidate passes, or the fastest is slower than eager, the
answer is the reference itself (speedup 1.0 over eager) and the table says so ("kept the reference").

Time, as last measured (session 8, the whole suite with --quick --seeds 2): 1,244 s for the 37 problems, 34 s a
problem, a candidate 2.0-7.7 s; three device calls of at most 10 minutes (--deadline-s, then --resume FILE), the
file kept on the warm machine between calls (bench/results/2026-12-01-s8/README.md). --quick is 3 correctness
trials, 50 timing trials, 0.5 s warm-up, 2 timed input sets. Problems run interleaved across levels (L1, L2, L3, L1,
...) so a cut run still covers every level; --deadline-s stops starting problems in time, results are rewritten
after every problem, --shard K/N splits the suite across device calls, --resume FILE skips what a previous command
measured, --merge combines several commands' JSON files (no GPU needed):
    PYTHONPATH=. python bench/expert_h200.py --merge A/expert_h200.json B/expert_h200.json --out DIR

Smoke test without a GPU (tiny twins, Triton's interpreter, no timings):
    PYTHONPATH=. python bench/expert_h200.py --out /tmp/e --device cpu --problems tiny --only 23_Softmax,1_GEMM_Square
The CPU acceptance of issue 16 (egg optimize with no model on every tiny problem, then egg check on best.py; ~15 min):
    PYTHONPATH=. python bench/expert_h200.py --out /tmp/e --device cpu --problems tiny --mode optimize --seeds 3 \
        --rounds 1 --check --per-problem-s 600 --deadline-s 3600
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.types import EvalOptions, EvalResult  # noqa: E402

QUICK = {"correctness_trials": 3, "timing_trials": 50, "warmup_ms": 500.0, "timed_input_sets": 2}
REFERENCE_S = 25.0  # a problem starts only with this much time for its reference run with both baselines (session 6: 11-13 s)
CANDIDATE_S = 10.0  # and one candidate (session 6: 2.6-5.2 s)
RESULTS = "expert_h200.json"


# problems -----------------------------------------------------------------------------------------------------------


def problems(kind: str, levels: set[int], only: set[str]) -> list[Path]:
    """The suite's problems, interleaved across levels so a cut run covers each."""
    by_level = {}
    for folder in sorted((ROOT / "data" / "problems" / kind).glob("level*")):
        level = int(folder.name.removeprefix("level"))
        if levels and level not in levels:
            continue
        files = sorted(folder.glob("*.py"), key=lambda p: int(p.stem.split("_", 1)[0]))
        by_level[level] = [p for p in files if not only or p.stem in only or f"level{level}/{p.stem}" in only]
    ordered: list[Path] = []
    while any(by_level.values()):
        for level in sorted(by_level):
            if by_level[level]:
                ordered.append(by_level[level].pop(0))
    return ordered


def key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# judging ------------------------------------------------------------------------------------------------------------


def candidate_row(label: str, rule: str, result: EvalResult, judge_s: float) -> dict[str, Any]:
    timing = result.timing
    return {"label": label, "rules": rule, "status": result.status.value, "reason": result.reason[:300],
            "median_ms": timing.median_ms if timing else None,
            "ci95_ms": [timing.ci95_low_ms, timing.ci95_high_ms] if timing else None,
            "speedups": result.speedups, "physical_floor_ms": result.physical_floor_ms,
            "kernels_launched": result.kernels_launched, "judge_s": round(judge_s, 1)}


def seeds_mode(path: Path, options: EvalOptions, args: argparse.Namespace, budget_s: float) -> dict[str, Any]:
    """The expert's seeds (and transformed seeds) of one problem, judged against one reference run."""
    from pipeline.expert.lowering import Lowering
    from pipeline.expert.seeds import alternatives
    from pipeline.judge import Judge
    from pipeline.problems.loader import load_candidate, load_problem

    started = time.monotonic()
    lowering = Lowering.of(path.read_text(encoding="utf-8"))
    seeds, notes = alternatives(lowering)
    problem = load_problem(path)
    rows: list[dict[str, Any]] = []
    queue = [(f"seed {i + 1}: {c.paradigm.name}", c.paradigm.options, c.lowered) for i, c in enumerate(seeds[: args.seeds])]
    with tempfile.TemporaryDirectory(prefix="egg-expert-bench-") as folder, Judge(options) as judge:
        reference = judge.reference(problem).result  # eager and torch.compile, timed by the judge
        while queue:
            if time.monotonic() - started + CANDIDATE_S > budget_s:
                rows.append({"label": queue[0][0], "status": "not_run", "reason": f"per-problem budget of {budget_s:.0f} s spent"})
                break
            label, lowered_options, lowered = queue.pop(0)
            file = Path(folder) / f"c{len(rows):02d}.py"
            file.write_text(lowered.source, encoding="utf-8")
            t0 = time.monotonic()
            result = judge.evaluate(problem, load_candidate(file))
            rows.append(candidate_row(label, ", ".join(lowered.written.rules), result, time.monotonic() - t0))
            rows[-1]["source"] = lowered.source
            if result.ok and args.transforms and not lowered_options.algebra:
                transformed = lowering.lower(lowered_options.but(algebra=True))
                if transformed.rewrites and not lowering.delegates(transformed) and transformed.source != lowered.source:
                    queue.insert(0, (f"{label} + {', '.join(transformed.rewrites)}", lowered_options.but(algebra=True), transformed))
    return {"seed_notes": notes, "candidates": rows, "baselines": _baselines(reference), "environment": reference.get("environment", {})}


def optimize_mode(path: Path, options: EvalOptions, args: argparse.Namespace, budget_s: float, work: Path) -> dict[str, Any]:
    """`egg optimize` itself with the expert backend (stage 2 and the held-out re-verification included)."""
    from pipeline.stages.method import Budget
    from pipeline.api import ModelChoice, optimize

    run_dir = work / key(path).replace("/", "_")
    budget = Budget(seeds=args.seeds, rounds=args.rounds, tune_evals=args.tune_evals, transforms=args.transforms,
                    max_wall_s=max(60.0, budget_s - REFERENCE_S - CANDIDATE_S))
    outcome = optimize(path, run_dir, ModelChoice(), options, budget, on_event=lambda m: print(f"    {m}", flush=True))
    rows = [{"label": f"{a.stage} {a.origin} {a.candidate_id}", "rules": a.note[:200], "status": a.status, "reason": a.reason[:300],
             "median_ms": a.median_ms, "kept": a.accepted} for a in outcome.progress.attempts]
    final = outcome.final
    if final is not None:
        rows.append(candidate_row("winner, re-verified on a held-out seed", outcome.progress.attempts and
                                  next((a.note for a in outcome.progress.attempts if a.candidate_id == outcome.progress.best_id), "") or "",
                                  final, final.duration_s))
        rows[-1]["final"] = True
    measured = {"candidates": rows, "baselines": _baselines(outcome.reference), "environment": outcome.reference.get("environment", {}),
                "headline": outcome.headline(), "best_is_reference": outcome.best_is_reference}
    if args.check:  # best.py judged again as `egg check` judges it (default options, a fresh judge)
        from pipeline.judge import evaluate
        from pipeline.problems.loader import load_candidate, load_problem

        checked = evaluate(load_problem(path), load_candidate(run_dir / "best.py"), EvalOptions(device=options.device))
        measured["check"] = {"status": checked.status.value, "reason": checked.reason[:300]}
        measured["best_py_triton"] = "@triton.jit" in (run_dir / "best.py").read_text(encoding="utf-8")
    return measured


def _baselines(reference: dict[str, Any]) -> dict[str, float | None]:
    return {name: (t or {}).get("median_ms") for name, t in reference.get("baselines", {}).items()}


# the answer per problem -----------------------------------------------------------------------------------------------


def answer(row: dict[str, Any], mode: str) -> dict[str, Any]:
    """egg's answer: the fastest passing candidate (optimize mode: the re-verified winner), or the reference when
    nothing passed or nothing beat eager."""
    eager, compiled = row["baselines"].get("eager"), row["baselines"].get("compile")
    pool = [c for c in row["candidates"] if c.get("status") == "ok" and c.get("median_ms")]
    if mode == "optimize":
        pool = [c for c in pool if c.get("final")]
    best = min(pool, key=lambda c: c["median_ms"], default=None)
    result = {"best": None if best is None else {k: best[k] for k in ("label", "rules", "median_ms", "speedups")}}
    if eager is None:  # --device cpu: correctness only
        passed = [c for c in row["candidates"] if c.get("status") == "ok" and (mode != "optimize" or c.get("final"))]
        return {"best": {k: passed[0].get(k) for k in ("label", "rules", "median_ms", "speedups")} if passed else None,
                "kept_reference": not passed, "why": "not timed on this device" if passed else "no candidate passed the judge",
                "egg_ms": None, "egg_vs_eager": None, "egg_vs_compile": None, "correct": bool(passed)}
    if best is not None and best["median_ms"] < eager:
        result.update(kept_reference=False, egg_ms=best["median_ms"], why="")
    else:
        why = "no candidate passed the judge" if best is None else f"the fastest correct candidate ({best['median_ms']:.4f} ms) is slower than eager"
        result.update(kept_reference=True, egg_ms=eager, why=why)
    result["egg_vs_eager"] = eager / result["egg_ms"] if eager and result["egg_ms"] else None
    result["egg_vs_compile"] = compiled / result["egg_ms"] if compiled and result["egg_ms"] else None
    result["correct"] = best is not None
    return result


def run_problem(path: Path, options: EvalOptions, args: argparse.Namespace, budget_s: float, work: Path) -> dict[str, Any]:
    print(f"=== {key(path)} (budget {budget_s:.0f} s)", flush=True)
    started = time.monotonic()
    row: dict[str, Any] = {"problem": key(path), "level": int(path.parent.name.removeprefix("level"))}
    try:
        measured = seeds_mode(path, options, args, budget_s) if args.mode == "seeds" else optimize_mode(path, options, args, budget_s, work)
        row.update(measured)
        row.update(answer(row, args.mode))
    except Exception:  # noqa: BLE001 - one broken problem must not lose the others' results
        row["error"] = traceback.format_exc()[-3000:]
        print(row["error"], flush=True)
    finally:
        gc.collect()
        _empty_cuda_cache()
    row["wall_s"] = round(time.monotonic() - started, 1)
    print(f"    {summary_line(row)}", flush=True)
    return row


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# the summary -----------------------------------------------------------------------------------------------------------


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value else "-"


def _ms(value: float | None) -> str:
    return f"{value:.4f}" if value else "-"


def summary_line(row: dict[str, Any]) -> str:
    if "error" in row:
        return "the run failed (see the JSON)"
    kept = f"kept the reference: {row['why']}" if row["kept_reference"] else f"best: {row['best']['label']}"
    return f"eager {_ms(row['baselines'].get('eager'))} ms, compile {_ms(row['baselines'].get('compile'))} ms, egg {_ms(row['egg_ms'])} ms " \
           f"({_x(row['egg_vs_eager'])} vs eager, {_x(row['egg_vs_compile'])} vs compile); {kept}"


def levels_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| level | problems measured | a candidate passed | faster than eager | geomean vs eager | geomean vs torch.compile | "
             "kept the reference |", "|---|---|---|---|---|---|---|"]
    for level in sorted({r["level"] for r in rows}):
        done = [r for r in rows if r["level"] == level and "error" not in r and "egg_ms" in r]
        lines.append(f"| {level} | {len(done)} | {sum(r['correct'] for r in done)} | {sum(bool(r['egg_vs_eager'] and r['egg_vs_eager'] > 1) for r in done)} | "
                     f"{_x(geomean([r['egg_vs_eager'] for r in done]))} | {_x(geomean([r['egg_vs_compile'] for r in done]))} | "
                     f"{sum(r['kept_reference'] for r in done)} |")
    return lines


def problems_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| problem | eager ms | compile ms | egg ms | vs eager | vs compile | candidates ok/judged | egg's answer |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "egg_ms" not in r:
            lines.append(f"| {r['problem']} | failed: see the JSON | | | | | | |")
            continue
        judged = [c for c in r["candidates"] if c.get("status") not in ("not_run",) and not c.get("final")]
        passed = sum(c.get("status") == "ok" for c in judged)
        what = f"reference ({r['why']})" if r["kept_reference"] else f"{r['best']['label']} [{r['best']['rules']}]"
        if "check" in r:
            what += f"; egg check on best.py: {r['check']['status']}" + ("" if r.get("best_py_triton") else " (not a Triton file)")
        lines.append(f"| {r['problem']} | {_ms(r['baselines'].get('eager'))} | {_ms(r['baselines'].get('compile'))} | {_ms(r['egg_ms'])} | "
                     f"{_x(r['egg_vs_eager'])} | {_x(r['egg_vs_compile'])} | {passed}/{len(judged)} | {what.replace('|', '/')} |")
    return lines


def candidates_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Every candidate", "", "| problem | candidate | status | median ms | vs eager | vs compile | judge s | rules / reason |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for c in r.get("candidates", []):
            speed = c.get("speedups") or {}
            text = c.get("rules") if c.get("status") == "ok" else c.get("reason", "")
            lines.append(f"| {r['problem']} | {c['label']} | {c.get('status')} | {_ms(c.get('median_ms'))} | {_x(speed.get('eager'))} | "
                         f"{_x(speed.get('compile'))} | {c.get('judge_s', '-')} | {str(text)[:140].replace('|', '/')} |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    rows = report["results"]
    return "\n".join([
        "# The expert backend (no model) on the suite, measured by the judge", "",
        f"Command: `{report['command']}`  ", f"Mode: {report['mode']}; judge options: {json.dumps(report['options'])}  ",
        f"Environment: {json.dumps(report.get('environment', {}))}  ", f"Wall: {report['wall_s']} s.", "",
        "egg's answer per problem is the fastest candidate that passed every check, or the reference itself when none "
        "passed or none beat eager (then its speedup over eager is 1.0 and over torch.compile it is compile / eager).", "",
        "## Per level", "", *levels_table(rows), "", "## Per problem", "", *problems_table(rows), "",
        *(["Not measured (deadline): " + ", ".join(report["skipped"]), ""] if report.get("skipped") else []),
        *candidates_section(rows), "",
    ]) + "\n"


def write(out: Path, report: dict[str, Any]) -> None:
    slim = dict(report, results=[{k: v for k, v in r.items()} for r in report["results"]])
    for r in slim["results"]:
        r["candidates"] = [{k: v for k, v in c.items() if k != "source"} for c in r.get("candidates", [])]
    (out / RESULTS).write_text(json.dumps(slim, indent=1), encoding="utf-8")
    (out / "expert_h200.md").write_text(markdown(report), encoding="utf-8")
    winners = {r["problem"]: next((c["source"] for c in r.get("candidates", []) if c.get("label") == (r.get("best") or {}).get("label")
                                   and "source" in c), None) for r in report["results"]}
    (out / "expert_h200_winners.json").write_text(json.dumps({k: v for k, v in winners.items() if v}), encoding="utf-8")


def merge(paths: list[str], out: Path) -> None:
    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    results: dict[str, dict[str, Any]] = {}
    for report in reports:
        for r in report["results"]:
            if r["problem"] not in results or "error" in results[r["problem"]]:
                results[r["problem"]] = r
    merged = dict(reports[-1], results=sorted(results.values(), key=lambda r: (r["level"], int(r["problem"].split("/")[1].split("_")[0]))),
                  command=" + ".join(r["command"] for r in reports), wall_s=sum(r["wall_s"] for r in reports), skipped=[])
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS).write_text(json.dumps(merged, indent=1), encoding="utf-8")
    (out / "expert_h200.md").write_text(markdown(merged), encoding="utf-8")
    print(markdown(merged))


# main -----------------------------------------------------------------------------------------------------------------


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where expert_h200.json / .md / _winners.json go")
    parser.add_argument("--mode", choices=("seeds", "optimize"), default="seeds")
    parser.add_argument("--problems", choices=("suite", "tiny"), default="suite", help="tiny: the CPU twins (levels 1-3)")
    parser.add_argument("--level", default="", help="comma-separated levels, e.g. 2,3 (default: all)")
    parser.add_argument("--only", default="", help="comma-separated problem names, e.g. 1_GEMM_Square,level2/8_BMM_Scale_Softmax")
    parser.add_argument("--shard", default="0/1", help="K/N: every N-th problem of the interleaved order, from the K-th (one per call)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds judged per problem (the expert offers at most 4)")
    parser.add_argument("--transforms", action=argparse.BooleanOptionalAction, default=True, help="judge transformed seeds too")
    parser.add_argument("--rounds", type=int, default=1, help="optimize mode: rounds per stage-2 sub-stage")
    parser.add_argument("--tune-evals", type=int, default=4, help="optimize mode: tuning configurations per rewrite")
    parser.add_argument("--check", action="store_true", help="optimize mode: judge best.py again as `egg check` does")
    parser.add_argument("--quick", action="store_true", help=f"fewer judge trials: {QUICK}")
    parser.add_argument("--per-problem-s", type=float, default=180.0, help="time limit per problem")
    parser.add_argument("--deadline-s", type=float, default=540.0,
                        help="everything is written by then: a problem starts only with time for a reference and a candidate, "
                             "and stops judging candidates in time")
    parser.add_argument("--resume", default="", help="a previous command's expert_h200.json: its problems are not run again")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--merge", nargs="+", default=None, help="combine these expert_h200.json files into --out")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    out = Path(args.out)
    if args.merge:
        merge(args.merge, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    options = EvalOptions(device=args.device, **(QUICK if args.quick else {}))
    previous = json.loads(Path(args.resume).read_text()) if args.resume else {"results": []}
    done = {r["problem"]: r for r in previous["results"] if "error" not in r}
    shard, shards = (int(v) for v in args.shard.split("/"))
    chosen = problems(args.problems, {int(v) for v in args.level.split(",") if v}, {v for v in args.only.split(",") if v})
    todo = [p for i, p in enumerate(chosen) if i % shards == shard and key(p) not in done]
    report = {"command": "python bench/expert_h200.py " + " ".join(argv), "mode": args.mode, "options": dataclasses.asdict(options),
              "results": list(done.values()), "skipped": [], "wall_s": 0.0}
    with tempfile.TemporaryDirectory(prefix="egg-expert-work-") as work:
        for index, path in enumerate(todo):
            left = args.deadline_s - (time.monotonic() - started)
            if left < REFERENCE_S + CANDIDATE_S:
                report["skipped"] = [key(p) for p in todo[index:]]
                print(f"deadline: {len(report['skipped'])} problems not started (run them with --resume {out / RESULTS})", flush=True)
                break
            row = run_problem(path, options, args, min(args.per_problem_s, left), Path(work))
            report["results"].append(row)
            report["environment"] = row.get("environment") or report.get("environment", {})
            report["wall_s"] = round(time.monotonic() - started, 1)
            write(out, report)
    report["wall_s"] = round(time.monotonic() - started, 1)
    write(out, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
