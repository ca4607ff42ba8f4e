"""The bottleneck report the Profile role read: its class and evidence, speed-of-light bars, and a novice view of a
few key numbers beside an expert view of all of them."""

from __future__ import annotations

import dataclasses
import html

import streamlit as st

from pipeline.profiler.report import KernelProfile, ProfileReport, time_text

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


BOUND_PCT = 60  # a throughput past this share of its peak is what bounds the kernel


def sol_bars_html(kernels: tuple[KernelProfile, ...]) -> str | None:
    """Speed-of-light bars: each kernel's memory and compute throughput in percent of peak, as plain HTML (no chart
    library to load: the plan gate is on screen at once), with the 60% line past which a side bounds the kernel."""
    rows = [k for k in kernels if k.memory_throughput_pct is not None or k.sm_throughput_pct is not None]
    if not rows:
        return None
    lines = []
    for kernel in rows:
        lines.append(f"<div class='sol-k'>{html.escape(kernel.name)}</div>")
        for label, value, colour in (("memory", kernel.memory_throughput_pct, "#1f77b4"), ("compute (SM)", kernel.sm_throughput_pct, "#ff7f0e")):
            shown = min(max(value or 0.0, 0.0), 100.0)
            text = f"{value:.0f}%" if value is not None else "n/a"
            lines.append(f"<div class='sol-r'><span class='sol-l'>{label}</span><span class='sol-t'><span class='sol-b' "
                         f"style='width:{shown:.1f}%;background:{colour}'></span><span class='sol-60'></span></span>"
                         f"<span class='sol-v'>{text}</span></div>")
    style = ("<style>.sol{font-family:sans-serif;font-size:13px}.sol-k{font-weight:600;margin-top:6px}.sol-r{display:flex;align-items:center;gap:8px;"
             "margin:2px 0}.sol-l{width:7.5em;color:#444}.sol-t{position:relative;flex:1;height:14px;background:#f0f2f6;border-radius:2px}"
             f".sol-b{{position:absolute;left:0;top:0;bottom:0;border-radius:2px}}.sol-60{{position:absolute;left:{BOUND_PCT}%;top:-3px;bottom:-3px;"
             "border-left:1px dashed #666}.sol-v{width:3.5em;text-align:right}.sol-c{color:#666;font-size:12px}</style>")
    return (style + "<div class='sol'>" + "".join(lines) +
            f"<div class='sol-c'>% of peak (speed of light); dashed: {BOUND_PCT}%, past which that side bounds the kernel</div></div>")


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


def reading(metric: str, value: float | int | str) -> str:
    """A metric's value as a person reads it: times in ns, us or ms; other numbers to four significant digits."""
    if isinstance(value, str):
        return value
    if metric.endswith("_ms"):
        return time_text(float(value))
    return f"{value:.4g}"


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
    st.dataframe([{"metric": e.metric, "value": reading(e.metric, e.value)} | ({} if hide_verdict else {"meaning": e.meaning})
                  for e in overall.evidence], hide_index=True, width="stretch",
                 column_config={"meaning": st.column_config.TextColumn(width="large")})
    bars = sol_bars_html(report.kernels)
    if bars is not None:
        st.html(bars)
    for kernel in sorted(report.kernels, key=lambda k: -(k.duration_ms or 0.0)):
        title = f"{kernel.name} ×{kernel.calls}" + (f": {kernel.classification.kind}" if kernel.classification and not hide_verdict else "")
        with st.expander(title, expanded=not expert and len(report.kernels) == 1):
            st.dataframe(all_metrics(kernel) if expert else key_metrics(kernel), hide_index=True, width="stretch")
    if report.floor_ms:
        st.caption(f"analytic floor of the problem on these ceilings: {time_text(report.floor_ms)}")
    for note in report.notes:
        st.caption(note)
