"""A bench run on screen: its problems as a sortable table whose rows open their sessions, and the suite's plots
(the fast_p curve against eager and torch.compile, the speedups per level, the per-stage gains), and two runs
compared problem by problem."""

from __future__ import annotations

from collections.abc import Sequence
from textwrap import shorten
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from pipeline.bench.results import fast_p, kernel_or_reference

BASELINE_COLOURS = {"eager": "#1565c0", "compile": "#ef6c00", "compile_max_autotune": "#6a1b9a"}
MARGIN = {"l": 10, "r": 10, "t": 30, "b": 10}


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"problem": r["problem"], "level": r["level"], "status": r["status"], "correct": r["correct"],
             "vs eager": r.get("speedup_eager"), "vs compile": r.get("speedup_compile"), "best.py": "reference" if r.get("keeps_reference", True) else "kernel",
             "kernel ms": r.get("kernel_ms"), "eager ms": r.get("eager_ms"), "compile ms": r.get("compile_ms"), "wall s": r.get("wall_s"),
             "session": f"./session?id={r['session_id']}" if r.get("session_id") else None,
             "what happened": shorten(" · ".join(t for t in (r.get("versus_compile"), r.get("story") or r.get("headline")) if t), 300, placeholder=' ...')} for r in rows]


def render_table(rows: Sequence[dict[str, Any]], key: str) -> None:
    st.dataframe(table_rows(rows), hide_index=True, width="stretch", key=key,
                 column_config={"vs eager": st.column_config.NumberColumn(format="%.3fx"), "vs compile": st.column_config.NumberColumn(format="%.3fx"),
                                "kernel ms": st.column_config.NumberColumn(format="%.4f"), "eager ms": st.column_config.NumberColumn(format="%.4f"),
                                "compile ms": st.column_config.NumberColumn(format="%.4f"), "wall s": st.column_config.NumberColumn(format="%.0f"),
                                "session": st.column_config.LinkColumn("session", display_text="open", help="the problem's session, gate by gate"),
                                "what happened": st.column_config.TextColumn(width="large")})


def timed(rows: Sequence[dict[str, Any]]) -> bool:
    return any(r.get("eager_ms") for r in rows)


def fast_p_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """fast_p for p from 0 to past the largest speedup, one line per baseline timed."""
    top = max([r.get("speedup_eager") or 0.0 for r in rows] + [r.get("speedup_compile") or 0.0 for r in rows] + [2.0])
    ps = [round(0.05 * n, 2) for n in range(int(min(top, 20.0) / 0.05) + 2)]
    figure = go.Figure()
    for baseline in ("eager", "compile", "compile_max_autotune"):
        if not any(r.get(f"{baseline}_ms") for r in rows):
            continue
        figure.add_scatter(x=ps, y=[100 * (fast_p(list(rows), p, baseline) or 0.0) for p in ps], mode="lines", name=f"vs {baseline}",
                           line={"shape": "hv", "color": BASELINE_COLOURS[baseline]}, hovertemplate="fast_%{x}: %{y:.0f}%<extra></extra>")
    figure.add_vline(x=1.0, line_dash="dot", annotation_text="p = 1")
    figure.update_layout(xaxis_title="p (speedup threshold)", yaxis_title="fast_p: % of problems", yaxis_range=[0, 105], height=320, margin=MARGIN,
                         legend={"orientation": "h", "y": 1.12})
    return figure


def levels_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Every problem's speedup over eager (a failure as the reference, 1.0), per level, on a log axis."""
    figure = go.Figure()
    for level in sorted({r["level"] for r in rows}, key=lambda v: (v is None, v or 0)):
        group = [r for r in rows if r["level"] == level]
        values = [kernel_or_reference(r, "eager") for r in group]
        figure.add_box(y=values, name=f"level {level}" if level is not None else "no level", boxpoints="all", jitter=0.4, pointpos=0,
                       text=[f"{r['problem']}: {r['status']}" + ("" if r["correct"] else " (the reference)") for r in group],
                       hovertemplate="%{text}: %{y:.3f}x<extra></extra>")
    figure.add_hline(y=1.0, line_dash="dot", annotation_text="eager")
    figure.update_layout(yaxis_type="log", yaxis_title="speedup vs eager (log)", showlegend=False, height=320, margin=MARGIN)
    return figure


def stage_gains_figure(gains: list[tuple[str, float, int]]) -> go.Figure:
    figure = go.Figure(go.Bar(x=[s for s, _, _ in gains], y=[g for _, g, _ in gains], text=[f"{g:.2f}x ({n})" for _, g, n in gains],
                              textposition="outside", cliponaxis=False))
    figure.add_hline(y=1.0, line_dash="dot")
    figure.update_layout(yaxis_title="geomean gain over the stage before", height=320, margin=MARGIN)
    return figure


def comparison(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The problems both runs hold: each one's speedup over eager in both, and whether it got faster or regressed
    (the 95% intervals apart), or moved within them."""
    by_name = {r["problem"]: r for r in b}
    out = []
    for left in a:
        right = by_name.get(left["problem"])
        if right is None:
            continue
        x, y = kernel_or_reference(left, "eager"), kernel_or_reference(right, "eager")
        lo_a, hi_a = left.get("speedup_eager_ci95") or [x, x]
        lo_b, hi_b = right.get("speedup_eager_ci95") or [y, y]
        if not timed([left, right]):
            verdict = "same" if left["correct"] == right["correct"] else ("now correct" if right["correct"] else "no longer correct")
        elif lo_b > hi_a:
            verdict = "faster"
        elif hi_b < lo_a:
            verdict = "regressed"
        else:
            verdict = "within noise"
        out.append({"problem": left["problem"], "level": left["level"], "first": x, "second": y, "change": (y / x) if x and y else None,
                    "first correct": left["correct"], "second correct": right["correct"], "verdict": verdict})
    return out
