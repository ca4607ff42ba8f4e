"""Bench: every stored suite run (`egg bench`), its problems in a sortable table whose rows open their sessions,
the fast_p curve against eager and torch.compile, the speedups per level, the per-stage gains, and two runs
compared problem by problem. It only reads the store (and imports the recorded runs bundled with egg)."""

from __future__ import annotations

import streamlit as st

from components.bench import comparison, fast_p_figure, levels_figure, render_table, stage_gains_figure, timed
from pages._context import store
from pipeline import api
from pipeline.bench.results import stage_gains, summary
from pipeline.store.records import BenchRunRecord

PLOT = {"displayModeBar": False}


def label(run: BenchRunRecord) -> str:
    recorded = " · recorded" if run.args.get("recorded") else ""
    return f"{run.id} · {', '.join(run.dirs)} · {run.args.get('device', '?')} · {run.status} · {run.created_at[:16]}{recorded}"


def import_recorded() -> None:
    try:
        found = api.import_recorded_bench(store())
    except (api.ApiError, OSError, ValueError, KeyError) as error:
        st.session_state["bench_message"] = f"error: {error}"
        return
    st.session_state["bench_message"] = f"{len(found)} recorded run(s) in the store" if found else "no recorded bench run is bundled (data/recorded/bench)"


def render_metrics(rows: list[dict]) -> None:
    s = summary(rows)
    columns = st.columns(4)
    columns[0].metric("problems ended", f"{s['done']} / {s['total']}")
    columns[1].metric("correct", f"{s['correct']}", help="a verified kernel (re-verified on a held-out seed)")
    columns[2].metric("fast_1 vs eager", "-" if s["fast_1"] is None else f"{s['fast_1']}", help="verified kernels faster than eager")
    columns[3].metric("geomean vs eager", "-" if s["geomean_eager"] is None else f"{s['geomean_eager']:.3f}x",
                      help="over every ended problem, one with no verified kernel counting as the reference (1.0x)")


def render_run(run: BenchRunRecord) -> None:
    rows = api.bench_rows(store(), run.id)
    st.caption(f"device {run.args.get('device')}, backend {run.args.get('backend')}, executor {run.args.get('executor')} on "
               f"{', '.join(run.args.get('slots') or []) or '-'}; started {run.created_at[:19]}" + (f", finished {run.finished_at[:19]}" if run.finished_at else ""))
    render_metrics(rows)
    render_table(rows, key="bench_table")
    if run.args.get("recorded"):
        st.caption("A recorded run: its rows came with egg; its sessions stayed on the machine that ran them.")
    if not timed(rows):
        st.info("Nothing in this run was timed (device cpu: correctness only), so there is no fast_p curve or speedup plot.")
        return
    left, right = st.columns(2)
    with left:
        st.markdown("**fast_p** (share of all problems with a verified kernel more than p times as fast)")
        st.plotly_chart(fast_p_figure(rows), width="stretch", config=PLOT, key="bench_fast_p")
    with right:
        st.markdown("**Speedup vs eager per level** (a problem with no verified kernel at 1.0x)")
        st.plotly_chart(levels_figure(rows), width="stretch", config=PLOT, key="bench_levels")
    gains = stage_gains(rows)
    if any(n >= 2 for _, _, n in gains):
        st.markdown("**Per-stage gains**")
        st.plotly_chart(stage_gains_figure(gains), width="stretch", config=PLOT, key="bench_stages")
    else:
        reached = max((n for _, _, n in gains), default=0)
        st.caption(f"Per-stage gains: {reached} problem(s) ended a stage with a timed kernel, too few for a plot "
                   "(a run whose wall budget stopped the problems inside stage 1).")


def render_compare(runs: list[BenchRunRecord]) -> None:
    st.subheader("Compare two runs")
    labels = {r.id: label(r) for r in runs}
    chosen = st.multiselect("two runs (first, then second)", list(labels), format_func=labels.get, max_selections=2, key="bench_compare")
    if len(chosen) != 2:
        return
    table = comparison(api.bench_rows(store(), chosen[0]), api.bench_rows(store(), chosen[1]))
    if not table:
        st.info("The two runs share no problem.")
        return
    counts = {v: sum(r["verdict"] == v for r in table) for v in ("faster", "regressed", "within noise", "now correct", "no longer correct", "same")}
    st.markdown(" · ".join(f"**{n}** {v}" for v, n in counts.items() if n) + f" of {len(table)} shared problems")
    st.dataframe(table, hide_index=True, width="stretch", key="bench_compare_table",
                 column_config={"first": st.column_config.NumberColumn("first vs eager", format="%.3fx"),
                                "second": st.column_config.NumberColumn("second vs eager", format="%.3fx"),
                                "change": st.column_config.NumberColumn(format="%.3fx")})


def render() -> None:
    st.title("Bench")
    st.session_state.setdefault("bench_message", "")
    runs = api.bench_runs(store())
    top = st.columns([3, 1])
    top[1].button("Import recorded runs", key="bench_import", on_click=import_recorded, help="the H200 runs bundled with egg (data/recorded/bench)")
    if st.session_state["bench_message"]:
        st.info(st.session_state["bench_message"])
    if not runs:
        top[0].info("No bench run yet: `egg bench DIR...` runs a suite (KernelBench's folder works as is); or import the recorded runs.")
        return
    labels = {r.id: label(r) for r in runs}
    wanted = st.query_params.get("run")
    index = list(labels).index(wanted) if wanted in labels else 0
    chosen = top[0].selectbox("Bench run", list(labels), index=index, format_func=labels.get, key="bench_pick")
    st.query_params["run"] = chosen
    render_run(store().bench_run(chosen))
    if len(runs) > 1:
        render_compare(runs)


render()
