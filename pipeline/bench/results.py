"""A suite's numbers: one row per problem from its session in the store, and the files of OUT.

A row's speedups are the verified kernel's (the winner re-verified on a held-out seed), None when no kernel
passed or nothing was timed. Its `answer_*` speedups are those of best.py, what a user takes away: the reference
itself (1.0 against eager) where no kernel passed or none beat eager. fast_p is the share of all problems with a
verified kernel faster than p times the baseline (KernelBench's fast_p; p = 0 is the share correct). Per level,
the geomean of the kernels counts a failure as the reference (1.0 against eager, eager/compile against
torch.compile), and the geomean of the answers is never below 1.0 against eager by construction.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipeline.report.compile_gap import versus_compile
from pipeline.store import Store
from pipeline.store.records import BENCH_ITEM_DONE, BenchItemRecord, BenchRunRecord, SessionRecord

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile", "compile_max_autotune")
CSV_COLUMNS = ("problem", "level", "status", "correct", "best_is_reference", "speedup_eager", "speedup_eager_low", "speedup_eager_high",
               "speedup_compile", "speedup_compile_low", "speedup_compile_high", "answer_speedup_eager", "answer_speedup_compile",
               "kernel_ms", "eager_ms", "compile_ms", "wall_s", "llm_calls", "input_tokens", "output_tokens", "cost_usd", "session_id", "slot", "story")


def _ratio_interval(base: dict | None, kernel: dict | None) -> list[float] | None:
    """The 95% interval of base/kernel from the two medians' intervals (the widest ratio they allow)."""
    if not base or not kernel:
        return None
    try:
        return [round(base["ci95_low_ms"] / kernel["ci95_high_ms"], 4), round(base["ci95_high_ms"] / kernel["ci95_low_ms"], 4)]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def _ms(timing: dict | None) -> float | None:
    return timing.get("median_ms") if timing else None


def row_for(item: BenchItemRecord, session: SessionRecord | None) -> dict[str, Any]:
    """The item's line of results.jsonl (what is known of it so far)."""
    outcome = session.outcome if session else {}
    baselines = outcome.get("baselines") or {}
    timing = outcome.get("timing")
    correct = bool(outcome) and outcome.get("final_status") == "ok" and not outcome.get("best_is_reference", True)
    row: dict[str, Any] = {
        "problem": item.problem, "level": item.level, "status": item.status, "correct": correct,
        "best_is_reference": bool(outcome.get("best_is_reference", True)), "keeps_reference": bool(outcome.get("keeps_reference", True)),
        "reverified": bool(outcome.get("reverified")), "headline": outcome.get("headline", ""), "generality": outcome.get("generality", ""),
        "candidates": outcome.get("candidates", 0), "stopped": outcome.get("stopped", ""),
        "kernel_ms": _ms(timing) if correct else None,
    }
    speedups = outcome.get("speedups") or {}
    for name in BASELINES:
        base = baselines.get(name)
        key = "eager" if name == "eager" else name
        row[f"{key}_ms"] = _ms(base)
        value = speedups.get(name) if correct else None
        row[f"speedup_{key}"] = round(value, 4) if value is not None else None
        row[f"speedup_{key}_ci95"] = _ratio_interval(base, timing) if correct and value is not None else None
        # best.py: the kernel where it is kept, else the reference (eager's time)
        eager_ms = _ms(baselines.get("eager"))
        if correct and value is not None and not outcome.get("keeps_reference", True):
            row[f"answer_speedup_{key}"] = row[f"speedup_{key}"]
        elif base and eager_ms:
            row[f"answer_speedup_{key}"] = round(_ms(base) / eager_ms, 4)
        else:
            row[f"answer_speedup_{key}"] = None
    row["versus_compile"] = _versus_compile(outcome, row, timing) if correct and not row["keeps_reference"] else ""
    llm = outcome.get("llm") or {}
    row.update({
        "stages": [{"stage": s["stage"], "median_ms": s["median_ms"]} for s in outcome.get("stages", [])],
        "wall_s": item.wall_s, "llm_calls": llm.get("calls", 0), "input_tokens": llm.get("input_tokens", 0),
        "output_tokens": llm.get("output_tokens", 0), "cost_usd": round(llm.get("cost_usd", 0.0), 6),
        "session_id": item.session_id, "slot": item.slot, "device": session.device if session else "", "story": item.story,
        "backend": (session.backend.get("describe") or session.backend.get("kind", "")) if session else "",
    })
    return row


def _versus_compile(outcome: dict[str, Any], row: dict[str, Any], timing: dict | None) -> str:
    """The session's own words where it stored them (with the profiler's reason), else the same wording from the
    numbers (a session from before egg stored them)."""
    if "versus_compile" in outcome:
        return outcome["versus_compile"] or ""
    return versus_compile(outcome.get("speedups") or {}, kernel_ms=_ms(timing), compile_ms=row.get("compile_ms"),
                          no_profile="the session stored no profile")


def rows(store: Store, run_id: str, fresh: bool = False) -> list[dict[str, Any]]:
    """Every item's row: as recorded when it ended, or (`fresh`, and for items not yet ended) from its session now."""
    items = store.bench_items(run_id)
    return [item.row if item.row and not fresh else row_for(item, store.session(item.session_id) if item.session_id else None) for item in items]


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fast_p(table: list[dict[str, Any]], p: float, baseline: str = "eager") -> float | None:
    """The share of all problems with a verified kernel more than p times as fast as the baseline; p = 0 is the
    share with a verified kernel. None when p > 0 and nothing was timed against that baseline."""
    if not table:
        return None
    if p == 0:
        return sum(1 for r in table if r["correct"]) / len(table)
    if not any(r.get(f"{baseline}_ms") for r in table):
        return None
    return sum(1 for r in table if r["correct"] and (r.get(f"speedup_{baseline}") or 0.0) > p) / len(table)


def kernel_or_reference(row: dict[str, Any], baseline: str) -> float | None:
    """The verified kernel's speedup, or the reference's own where none passed (1.0 against eager)."""
    if row.get(f"speedup_{baseline}") is not None:
        return row[f"speedup_{baseline}"]
    base, eager = row.get(f"{baseline}_ms"), row.get("eager_ms")
    if baseline == "eager":
        return 1.0
    return base / eager if base and eager else None


def stage_gains(table: list[dict[str, Any]]) -> list[tuple[str, float | None, int]]:
    """Per stage: the geomean over problems of its best time against the stage before it (stage 1: eager), and
    how many problems it rests on."""
    gains: dict[str, list[float]] = {}
    for r in table:
        before = r.get("eager_ms")
        for s in r.get("stages") or []:
            if before and s.get("median_ms"):
                gains.setdefault(s["stage"], []).append(before / s["median_ms"])
                before = s["median_ms"]
    return [(stage, geomean(values), len(values)) for stage, values in gains.items()]


def summary(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The live summary line's numbers: done, correct, fast_1 and the kernels' geomean against eager so far."""
    finished = [r for r in table if r["status"] in BENCH_ITEM_DONE]
    correct = sum(1 for r in finished if r["correct"])
    fast = sum(1 for r in finished if r["correct"] and (r.get("speedup_eager") or 0.0) > 1.0)
    timed = any(r.get("eager_ms") for r in finished)
    return {"done": len(finished), "total": len(table), "correct": correct, "fast_1": fast if timed else None,
            "geomean_eager": geomean(kernel_or_reference(r, "eager") for r in finished) if timed else None}


def summary_line(table: list[dict[str, Any]]) -> str:
    s = summary(table)
    text = f"{s['done']}/{s['total']} done, {s['correct']} correct"
    if s["fast_1"] is not None:
        text += f", fast_1 {s['fast_1']}, geomean {s['geomean_eager']:.3f}x vs eager"
    return text


def write_outputs(out: Path, run: BenchRunRecord, table: list[dict[str, Any]]) -> list[Path]:
    """results.jsonl, results.csv and report.md in `out`, each replaced whole (a kill leaves the last full one)."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl = "".join(json.dumps(r, sort_keys=True) + "\n" for r in table)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in table:
        flat = dict(r)
        for key in ("eager", "compile"):
            interval = r.get(f"speedup_{key}_ci95") or [None, None]
            flat[f"speedup_{key}_low"], flat[f"speedup_{key}_high"] = interval
        writer.writerow(flat)
    written = []
    for name, text in (("results.jsonl", jsonl), ("results.csv", buffer.getvalue()), ("report.md", report(run, table))):
        path = out / name
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        written.append(path)
    return written


def cell(text: Any) -> str:
    """A value as one Markdown table cell: a `|` or a line break in a file name or a story cannot add a cell or a row."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|")


def _fmt(value: float | None, suffix: str = "x", digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _levels(table: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    keys = sorted({r["level"] for r in table}, key=lambda v: (v is None, v or 0))
    groups = [(f"level {k}" if k is not None else "no level", [r for r in table if r["level"] == k]) for k in keys]
    return groups + ([("all", table)] if len(groups) > 1 else [])


def report(run: BenchRunRecord, table: list[dict[str, Any]]) -> str:
    args = run.args
    statuses: dict[str, int] = {}
    for r in table:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    timed = any(r.get("eager_ms") for r in table)
    lines = [f"# egg bench {run.id}", "", f"{summary_line(table)}.", "",
             f"Folders: {', '.join(cell(d) for d in run.dirs)}; device {args.get('device')}, backend {args.get('backend')}, "
             f"executor {args.get('executor')}, slots {', '.join(args.get('slots') or []) or '-'}; started {run.created_at}, "
             f"{'finished ' + run.finished_at if run.finished_at else 'status ' + run.status}.",
             "", "Problems by status: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + "."]
    correct = [r for r in table if r["correct"]]
    kept = [r for r in correct if not r.get("keeps_reference", True)]
    if kept:
        unverified = [r for r in kept if not r.get("reverified")]
        lines += ["", f"{len(kept) - len(unverified)} of the {len(kept)} kernels kept as best.py were judged again in a fresh process on a "
                  "held-out seed" + (f"; {len(unverified)} carry their verdict from the search "
                                    f"({', '.join(cell(r['problem']) for r in unverified[:8])}{', ...' if len(unverified) > 8 else ''})" if unverified else "") + "."]
    shaped = [r for r in correct if r.get("generality")]
    if shaped:
        general = sum(r["generality"] == "general" for r in shaped)
        leading = sum(r["generality"] == "general in the leading size" for r in shaped)
        unchecked = sum(r["generality"] == "not checked" for r in shaped)
        lines += ["", f"On inputs of other shapes (the batch halved, odd, doubled plus one; a row length odd and doubled plus one), "
                  f"{general} of the {len(shaped)} verified kernels are general"
                  + (f", {leading} general in the leading size (refusing other sizes of a later dimension in one line)" if leading else "")
                  + f" and {len(shaped) - general - leading - unchecked} specialised to the problem's shapes (refusing others in one line)"
                  + (f"; {unchecked} not checked (the reference runs on no such inputs)" if unchecked else "") + "."]
    slower = [r for r in table if r.get("versus_compile")]
    if slower:
        lines += ["", f"{len(slower)} of the {sum(1 for r in table if r['correct'] and not r.get('keeps_reference', True))} kernels kept "
                  "as best.py are slower than torch.compile (see \"Slower than torch.compile\" below)."]
    stopped = [r for r in table if r.get("stopped")]
    if stopped:
        lines += ["", f"{len(stopped)} of {len(table)} problems stopped early ({cell(stopped[0]['stopped'])}" + (", ..." if len(stopped) > 1 else "") + ")."]
    if not timed:
        lines += ["", "Nothing was timed (device cpu: Triton's interpreter checks correctness only), so there is no fast_p "
                  "and no speedup below; `correct` is the share whose verified kernel passed the judge."]
    baselines = [b for b in ("eager", "compile", "compile_max_autotune") if any(r.get(f"{b}_ms") for r in table)]
    lines += ["", "## fast_p", "", "The share of all problems with a verified kernel more than p times as fast as the baseline "
              "(p = 0: the share correct).", "", "| level | baseline | n | " + " | ".join(f"fast_{p:g}" for p in FAST_P) + " |",
              "|---|---|---|" + "---|" * len(FAST_P)]
    for label, group in _levels(table):
        for baseline in baselines or ["eager"]:
            cells = [_share(fast_p(group, p, baseline)) for p in FAST_P]
            lines.append(f"| {label} | {baseline} | {len(group)} | " + " | ".join(cells) + " |")
    if timed:
        lines += ["", "## Speedups per level", "",
                  "Kernels: the verified kernel's speedup, a problem with none counting as the reference (1.0 against eager). "
                  "Answers: best.py's, which is the reference wherever no kernel beat eager.", "",
                  "| level | n | kernels: mean / geomean vs eager | vs torch.compile | answers: geomean vs eager | vs torch.compile |", "|---|---|---|---|---|---|"]
        for label, group in _levels(table):
            k_eager = [kernel_or_reference(r, "eager") for r in group]
            k_compile = [v for v in (kernel_or_reference(r, "compile") for r in group) if v is not None]
            a_eager = [r["answer_speedup_eager"] for r in group if r.get("answer_speedup_eager")] or [1.0]
            a_compile = [r["answer_speedup_compile"] for r in group if r.get("answer_speedup_compile")]
            mean = sum(k_eager) / len(k_eager)
            lines.append(f"| {label} | {len(group)} | {_fmt(mean)} / {_fmt(geomean(k_eager))} | {_fmt(geomean(k_compile))}"
                         f"{'' if len(k_compile) == len(group) else f' ({len(group) - len(k_compile)} without a baseline)'} | "
                         f"{_fmt(geomean(a_eager))} | {_fmt(geomean(a_compile))} |")
        lines += ["", "## Per-stage gains", "", "The geomean over problems of each stage's best time against the one before it "
                  "(stage 1 against eager).", "", "| stage | problems | geomean gain |", "|---|---|---|"]
        for stage, gain, count in stage_gains(table):
            lines.append(f"| {stage} | {count} | {_fmt(gain)} |")
    if slower:
        lines += ["", "## Slower than torch.compile", "", "Kept as best.py (faster than eager), yet slower than torch.compile; "
                  "the reason is the profiler's where the run profiled the kernel.", ""]
        lines += [f"- {cell(r['problem'])}: {cell(r['versus_compile'])}" for r in slower]
    calls = sum(r.get("llm_calls") or 0 for r in table)
    lines += ["", "## Cost", "", f"{calls} model calls, {sum(r.get('input_tokens') or 0 for r in table)} input and "
              f"{sum(r.get('output_tokens') or 0 for r in table)} output tokens, ${sum(r.get('cost_usd') or 0 for r in table):.4f}; "
              f"{sum(r.get('wall_s') or 0 for r in table):.0f} s of problem wall time in all.", "", "## Problems", "",
              "| problem | level | status | correct | vs eager (95% CI) | vs torch.compile (95% CI) | best.py | wall s | what happened |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        def speed(key: str) -> str:
            ci = r.get(f"speedup_{key}_ci95")
            return _fmt(r.get(f"speedup_{key}")) + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        kept = "reference" if r.get("keeps_reference", True) else "kernel"
        story = cell((r.get("story") or r.get("headline") or "")[:160])
        lines.append(f"| {cell(r['problem'])} | {r['level'] if r['level'] is not None else '-'} | {r['status']} | {'yes' if r['correct'] else 'no'} | "
                     f"{speed('eager')} | {speed('compile')} | {kept} | {_fmt(r.get('wall_s'), '', 0)} | {story} |")
    return "\n".join(lines) + "\n"
