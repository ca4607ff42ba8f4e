"""One screen for a person about one verdict: status, the checks, the errors, the times."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipeline.types import EvalResult, Status

_STYLE = {Status.OK: "bold green", Status.MISMATCH: "bold yellow", Status.INFRA_ERROR: "bold magenta"}
_MARK = {True: Text("pass", style="green"), False: Text("FAIL", style="bold red"), None: Text("skip", style="dim")}
LOG_LINES = 15


def render(result: EvalResult, console: Console) -> None:
    """Print the verdict: a headline, the checks, the trials, timings and flags, and the log tail on failure."""
    style = _STYLE.get(result.status, "bold red")
    headline = Text.assemble((result.status.value.upper(), style), "  ", result.reason)
    parts = [headline, Text(f"candidate {result.candidate.path}\nproblem   {result.problem.path}   device {result.device}", style="dim")]
    if result.generality:
        parts.append(Text(f"on inputs of other shapes: {result.generality}"))
    if result.checks:
        parts.append(_checks(result))
    if result.trials:
        passed = sum(t.passed for t in result.trials)
        worst = max((t.max_abs_err or 0.0) for t in result.trials)
        parts.append(Text(f"correctness: {passed}/{len(result.trials)} calls match; max abs error {worst:.3g}"))
    if result.timing or result.baselines:
        parts.append(_timings(result))
    for flag in result.flags:
        parts.append(Text(f"note [{flag.name}]: {flag.message}", style="yellow"))
    if result.log_tail and not result.ok:
        tail = "\n".join(result.log_tail.rstrip().splitlines()[-LOG_LINES:])
        parts.append(Panel(Text(tail), title="log tail", border_style="dim"))
    console.print(Panel(Group(*parts), title="egg check", border_style=style.split()[-1]))


def _checks(result: EvalResult) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("check")
    table.add_column("")
    table.add_column("detail", overflow="fold")
    for check in result.checks:
        table.add_row(check.name, _MARK[check.passed], check.detail)
    return table


def _timings(result: EvalResult) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("timed", "median ms", "95% CI (median)", "mean ms", "trials", "speedup"):
        table.add_column(column)
    rows = ([("candidate", result.timing)] if result.timing else []) + list(result.baselines.items())
    for name, t in rows:
        speedup = result.speedups.get(name)
        table.add_row(
            name,
            f"{t.median_ms:.4f}",
            f"[{t.ci95_low_ms:.4f}, {t.ci95_high_ms:.4f}]",
            f"{t.mean_ms:.4f}",
            str(t.trials),
            f"{speedup:.3f}x" if speedup else ("" if name == "candidate" else "-"),
        )
    return table
