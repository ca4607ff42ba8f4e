"""Every candidate of a session, and three plots: the per-stage gains (as in the paper's ablation), the candidates'
times over the session coloured by status, and a roofline with the machine's ceilings and every timed candidate."""

from __future__ import annotations

from collections.abc import Sequence
from textwrap import shorten

import plotly.graph_objects as go
import streamlit as st

from pipeline.api import CandidateRow
from pipeline.profiler.report import Ceilings
from pipeline.profiler.costs import ProblemCosts

STATUS_COLOURS = {"ok": "#2e7d32", "mismatch": "#c62828", "compile_error": "#ef6c00", "runtime_error": "#ad1457", "timeout": "#6a1b9a",
                  "banned": "#000000", "infra_error": "#757575", None: "#bdbdbd"}
STAGE_ORDER = ("algorithm", "parallel_mapping", "tiling", "memory")


def table_rows(rows: Sequence[CandidateRow], marks: dict[int, list[str]] | None = None) -> list[dict]:
    """`marks`: per candidate, the stages that handed it on and `best.py` (pipeline.api.candidate_marks)."""
    marks = marks or {}
    return [{"id": r.id, "stage": r.stage, "origin": r.origin, "by": r.author, "parent": r.parent_id, "status": r.status or "not judged",
             "kept": ", ".join(marks.get(r.id, [])), "median ms": r.median_ms, "vs eager": r.speedups.get("eager"),
             "vs compile": r.speedups.get("compile"), "why": shorten(r.reason, 160, placeholder=' ...')} for r in rows]


def render_table(rows: Sequence[CandidateRow], marks: dict[int, list[str]] | None = None) -> None:
    st.dataframe(table_rows(rows, marks), hide_index=True, width="stretch",
                 column_config={"kept": st.column_config.TextColumn(help="the stages that handed this candidate on, and best.py: the session's result"),
                                "median ms": st.column_config.NumberColumn(format="%.4f"),
                                "vs eager": st.column_config.NumberColumn(format="%.3fx"),
                                "vs compile": st.column_config.NumberColumn(format="%.3fx")})


def stage_gains(rows: Sequence[CandidateRow], eager_ms: float | None, kept: dict[str, float | None]) -> list[tuple[str, float]]:
    """Speedup over eager of the kernel each stage handed on (cumulative, like the paper's ablation)."""
    if not eager_ms:
        return []
    gains = []
    for stage in STAGE_ORDER:
        best = kept.get(stage)
        if best:
            gains.append((stage, eager_ms / best))
    return gains


def stage_gains_figure(gains: list[tuple[str, float]]) -> go.Figure:
    figure = go.Figure(go.Bar(x=[s for s, _ in gains], y=[g for _, g in gains], text=[f"{g:.2f}x" for _, g in gains], textposition="outside",
                              cliponaxis=False))
    # the eager line's label below the line at its left end, and room above the tallest bar's text: nothing clipped
    figure.add_hline(y=1.0, line_dash="dot", annotation_text="eager (1x)", annotation_position="bottom left")
    figure.update_layout(yaxis_title="speedup vs eager (after the stage)", height=320, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                         yaxis_range=[0, 1.2 * max([1.0, *(g for _, g in gains)])])
    return figure


def times_figure(rows: Sequence[CandidateRow]) -> go.Figure | None:
    """Each timed candidate's median over the session, coloured by status; None when nothing was timed (the CPU).
    Candidates without a time are counted in the legend, never drawn at a height they do not have."""
    timed = [r for r in rows if r.median_ms]
    if not timed:
        return None
    figure = go.Figure()
    for status in sorted({r.status for r in rows}, key=lambda s: (s != "ok", s or "")):
        group = [r for r in timed if r.status == status]
        untimed = sum(1 for r in rows if r.status == status and not r.median_ms)
        name = (status or "not judged") + (f" ({untimed} not timed)" if untimed else "")
        figure.add_scatter(x=[r.id for r in group], y=[r.median_ms for r in group], mode="markers", name=name,
                           marker={"color": STATUS_COLOURS.get(status, "#9e9e9e"), "size": 9, "symbol": "circle" if status == "ok" else "x"},
                           text=[f"{r.stage}/{r.origin}: {shorten(r.reason, 100, placeholder=' ...')}" for r in group], hovertemplate="candidate %{x}: %{text}<extra></extra>")
    figure.update_layout(xaxis_title="candidate (in the order judged)", yaxis_title="median ms", yaxis_type="log",
                         height=340, margin={"l": 10, "r": 10, "t": 20, "b": 10})
    return figure


def roofline_figure(rows: Sequence[CandidateRow], ceilings: Ceilings, costs: ProblemCosts, precision: str) -> go.Figure | None:
    """Attainable FLOP/s against arithmetic intensity: the memory roof and the compute roof of `ceilings`, and each
    timed candidate at the problem's intensity (the same work for all, so they differ only in height)."""
    intensity = costs.intensity()
    timed = [r for r in rows if r.median_ms and r.status == "ok"]
    if not timed:
        return None
    if not costs.flops:  # no matmul or convolution FLOPs (softmax, norms, GELU): the memory roof is the only one
        return bandwidth_figure(timed, ceilings, costs)
    if not intensity:
        return None
    peak = ceilings.compute_flops_per_s(precision) or max(ceilings.matmul_flops_per_s.values())
    bandwidth = ceilings.copy_bytes_per_s
    ridge = peak / bandwidth
    xs = [min(intensity, ridge) / 100, ridge, max(intensity, ridge) * 100]
    figure = go.Figure()
    figure.add_scatter(x=xs, y=[min(peak, bandwidth * x) / 1e12 for x in xs], mode="lines", name=f"roofs ({ceilings.source})",
                       line={"color": "#455a64"})
    figure.add_scatter(x=[intensity] * len(timed), y=[costs.flops / (r.median_ms / 1e3) / 1e12 for r in timed], mode="markers",
                       name="timed candidates", text=[f"candidate {r.id}: {r.median_ms:.4g} ms" for r in timed], hovertemplate="%{text}<extra></extra>")
    figure.update_layout(xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
                         yaxis={"type": "log", "title": f"TFLOP/s ({precision} peak {peak / 1e12:.0f})"}, height=360,
                         margin={"l": 10, "r": 10, "t": 20, "b": 10}, title={"text": ceilings.device, "font": {"size": 12}})
    return figure


def bandwidth_figure(timed: Sequence[CandidateRow], ceilings: Ceilings, costs: ProblemCosts) -> go.Figure | None:
    """A problem with no FLOPs the counter sees is bound by memory: each timed candidate's effective bandwidth (the
    problem's fewest bytes over its time) against the measured copy bandwidth, the roof no kernel passes."""
    if not costs.min_bytes or not ceilings.copy_bytes_per_s:
        return None
    roof = ceilings.copy_bytes_per_s / 1e9
    achieved = [costs.min_bytes / (r.median_ms / 1e3) / 1e9 for r in timed]
    figure = go.Figure()
    figure.add_bar(x=[f"candidate {r.id}" for r in timed], y=achieved, name="effective bandwidth",
                   text=[f"{a:.0f} GB/s ({100 * a / roof:.0f}%)" for a in achieved], textposition="outside", cliponaxis=False,
                   hovertext=[f"{r.median_ms:.4g} ms for {costs.min_bytes / 1e6:.4g} MB" for r in timed], hoverinfo="text")
    figure.add_hline(y=roof, line_dash="dot", annotation_text=f"memory roof {roof:.0f} GB/s ({ceilings.source})")
    figure.update_layout(yaxis={"title": "GB/s: the problem's fewest bytes / median time", "range": [0, roof * 1.15]}, height=360,
                         margin={"l": 10, "r": 10, "t": 30, "b": 10}, title={"text": f"{ceilings.device}: memory roof (no FLOPs to plot)", "font": {"size": 12}})
    return figure
