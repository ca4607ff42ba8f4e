"""Candidates: every candidate of a session with its lineage, status, time and speedup; any one's source, diff
against its parent and verdict; the per-stage gains, the times over the session, and the roofline."""

from __future__ import annotations

import streamlit as st

from components.candidates import render_table, roofline_figure, stage_gains, stage_gains_figure, times_figure
from components.diff import render_diff
from components.verdict import render_verdict
from pages._context import session_from_url, store
from pipeline import api
from pipeline.profiler.ceilings import nominal
from pipeline.profiler.report import ProfileReport
from pipeline.store.records import SessionRecord
from pipeline.types import from_jsonable


def kept_per_stage(record: SessionRecord) -> dict[str, float | None]:
    """The time of the kernel each stage handed on (from its stage_end gate)."""
    return {g.stage: g.data.best_ms for g in api.gates(store(), record.id, kind="stage_end")}


def latest_report(record: SessionRecord) -> ProfileReport | None:
    plans = [g for g in api.gates(store(), record.id, kind="plan") if g.data.report]
    return from_jsonable(ProfileReport, plans[-1].data.report) if plans else None


def eager_ms(record: SessionRecord, rows) -> float | None:
    timed = next((r for r in rows if r.median_ms and r.status == "ok"), None)
    if timed is None:
        return None
    detail = api.candidate_detail(store(), record.id, timed.id)
    eager = detail.verdict.baselines.get("eager") if detail.verdict else None
    return eager.median_ms if eager else None


PLOTS = ("Per-stage gains", "Times over the session", "Roofline")


def render_plots(record: SessionRecord, rows) -> None:
    """One plot at a time (the one chosen is the only one built and sent: a page of 1,000 candidates stays quick)."""
    chosen = st.segmented_control("plot", PLOTS, default=PLOTS[0], key="candidates_plot", label_visibility="collapsed") or PLOTS[0]
    if chosen == PLOTS[0]:
        gains = stage_gains(rows, eager_ms(record, rows), kept_per_stage(record))
        if gains:
            st.plotly_chart(stage_gains_figure(gains), width="stretch")
        else:
            st.info("No timed stage yet (the CPU times nothing): the gains appear once a session on a GPU has finished a stage.")
    elif chosen == PLOTS[1]:
        times = times_figure(rows)
        if times is None:
            st.info("No candidate was timed (the CPU checks correctness only): the times appear for a session on a GPU.")
        else:
            st.plotly_chart(times, width="stretch")
    else:
        report = latest_report(record)
        ceilings = report.ceilings if report and report.ceilings else nominal()
        figure = roofline_figure(rows, ceilings, report.costs, "bf16" if report and report.costs and set(report.costs.dtypes) & {"float16", "bfloat16"} else "fp32") if report and report.costs else None
        if figure is None:
            st.info("No roofline yet: it needs a timed candidate and the problem's costs (from a profile of a session on a GPU).")
        else:
            st.plotly_chart(figure, width="stretch")
            st.caption(f"ceilings: {ceilings.source} ({ceilings.device})")


def render_one(record: SessionRecord, rows) -> None:
    labels = {r.id: f"{r.id} · {r.stage}/{r.origin} · {r.status or 'not judged'}" for r in rows}
    ids = list(labels)
    chosen = st.selectbox("Candidate", ids, index=len(ids) - 1, key="candidate_pick", format_func=labels.__getitem__)
    detail = api.candidate_detail(store(), record.id, chosen)
    source_tab, diff_tab, verdict_tab = st.tabs(["Source", "Diff against its parent", "Verdict"])
    with source_tab:
        st.code(detail.source, language="python", line_numbers=True)
    with diff_tab:
        render_diff(detail.parent_source or "", detail.source, before_name=f"candidate {detail.row.parent_id}" if detail.row.parent_id else "reference problem")
    with verdict_tab:
        if detail.verdict is None:
            st.info("not judged (yet)")
        else:
            render_verdict(detail.verdict)


def render() -> None:
    record = session_from_url()
    if record is None:
        return
    st.title(f"Candidates · {record.problem_name}")
    st.page_link("pages/session.py", label="back to the session", query_params={"id": record.id})
    rows = api.candidate_rows(store(), record.id)
    if not rows:
        st.info("No candidate judged yet.")
        return
    render_table(rows, api.candidate_marks(store(), record.id))
    render_plots(record, rows)
    render_one(record, rows)


render()
