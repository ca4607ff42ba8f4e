"""The bottleneck report the Profile role read: its class and evidence, speed-of-light bars, and a novice view of a
few key numbers beside an expert view of all of them."""

from __future__ import annotations

import dataclasses

import plotly.graph_objects as go
import streamlit as st

from pipeline.profiler.report import KernelProfile, ProfileReport

SOURCE_TEXT = {
    "ncu": "Nsight Compute hardware counters",
    "torch_profiler": "kernel times from the torch profiler (no hardware counters on this GPU)",
    "static_only": "static facts only (no GPU: each kernel compiled for sm_90 on the CPU; the class is predicted)",
}
# The few numbers a student should look at first, each with what it tells.
KEY_METRICS = (
    ("duration_ms", "time", "how long the kernel's calls took, together"),
    ("memory_throughput_pct", "memory speed of light %", "how busy the busiest memory unit was; near 100% means memory-bound"),
    ("sm_throughput_pct", "compute speed of light %", "how busy the busiest compute pipe was; near 100% means compute-bound"),
    ("achieved_occupancy_pct", "achieved occupancy %", "resident warps out of the maximum: latency hiding"),
    ("theoretical_occupancy_pct", "theoretical occupancy %", "the most warps that could be resident, given registers and shared memory"),
    ("registers_per_thread", "registers per thread", "more registers per thread means fewer warps per SM"),
    ("waves", "waves", "blocks per SM-load of blocks: below 1 leaves SMs idle"),
)


def sol_figure(kernels: tuple[KernelProfile, ...]) -> go.Figure | None:
    """Speed-of-light bars: each kernel's memory and compute throughput in percent of peak."""
    rows = [k for k in kernels if k.memory_throughput_pct is not None or k.sm_throughput_pct is not None]
    if not rows:
        return None
    names = [k.name for k in rows]
    figure = go.Figure()
    figure.add_bar(y=names, x=[k.memory_throughput_pct or 0 for k in rows], name="memory", orientation="h")
    figure.add_bar(y=names, x=[k.sm_throughput_pct or 0 for k in rows], name="compute (SM)", orientation="h")
    figure.add_vline(x=60, line_dash="dot", annotation_text="60%: bound", annotation_position="top")
    figure.update_layout(barmode="group", xaxis={"range": [0, 100], "title": "% of peak (speed of light)"}, height=120 + 50 * len(rows),
                         margin={"l": 10, "r": 10, "t": 30, "b": 10}, legend={"orientation": "h"})
    return figure


def key_metrics(kernel: KernelProfile) -> list[dict[str, str]]:
    rows = []
    for field, label, meaning in KEY_METRICS:
        value = getattr(kernel, field)
        if value is not None:
            rows.append({"metric": label, "value": f"{value:.4g}" if isinstance(value, float) else str(value), "what it tells": meaning})
    return rows


def all_metrics(kernel: KernelProfile) -> list[dict[str, str]]:
    rows = []
    for field in dataclasses.fields(kernel):
        value = getattr(kernel, field.name)
        if field.name in ("metrics", "classification", "static", "stalls") or value in (None, (), {}):
            continue
        rows.append({"name": field.name, "value": str(value)})
    rows += [{"name": f"stall: {reason}", "value": f"{v:.3g}"} for reason, v in kernel.stalls.items()]
    if kernel.static is not None:
        rows += [{"name": f"static: {k}", "value": str(v)} for k, v in dataclasses.asdict(kernel.static).items() if v not in (None, {}, "")]
    rows += [{"name": name, "value": f"{v:.6g}"} for name, v in sorted(kernel.metrics.items())]
    return rows


def render_profile(report: ProfileReport, *, expert: bool, hide_verdict: bool = False) -> None:
    """The report; with `hide_verdict` (a learner about to predict) the numbers only: no class, no summary, no
    evidence meanings that name it."""
    st.caption(f"rests on {SOURCE_TEXT.get(report.source, report.source)}" + (f" · {report.ceilings.device}" if report.ceilings else ""))
    overall = report.overall
    if overall is None:
        st.warning("the profiler saw no kernel")
        return
    if not hide_verdict:
        distance = f", {overall.roofline_distance_pct:.0f}% from the roofline" if overall.roofline_distance_pct is not None else ""
        st.markdown(f"**{overall.kind}**{' (predicted)' if overall.predicted else ''}{distance}: {overall.summary}")
    st.dataframe([{"metric": e.metric, "value": e.value if isinstance(e.value, str) else f"{e.value:.4g}"} | ({} if hide_verdict else {"meaning": e.meaning})
                  for e in overall.evidence], hide_index=True, width="stretch")
    figure = sol_figure(report.kernels)
    if figure is not None:
        st.plotly_chart(figure, width="stretch", config={"displayModeBar": False})
    for kernel in sorted(report.kernels, key=lambda k: -(k.duration_ms or 0.0)):
        title = f"{kernel.name} ×{kernel.calls}" + (f": {kernel.classification.kind}" if kernel.classification and not hide_verdict else "")
        with st.expander(title, expanded=not expert and len(report.kernels) == 1):
            st.dataframe(all_metrics(kernel) if expert else key_metrics(kernel), hide_index=True, width="stretch")
    if report.floor_ms:
        st.caption(f"analytic floor of the problem on these ceilings: {report.floor_ms:.4g} ms")
    for note in report.notes:
        st.caption(note)
