"""The Bench page on real stores: a run made by `egg bench` on the CPU (its problems, each linked to its session),
and a timed run's rows (the fast_p curve, the speedups per level, the per-stage gains, two runs compared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pipeline import api
from pipeline.bench.results import row_for
from pipeline.store.records import BenchItemRecord
from tests.bench.test_metrics import outcome, session
from tests.ui.conftest import ROOT

TINY = ROOT / "data" / "problems" / "tiny"


def charts(at) -> dict[str, dict]:
    """The page's plotly figures by their y axis' title."""
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return {f["layout"].get("yaxis", {}).get("title", {}).get("text", ""): f for f in figures}


def timed_run(store, run_id: str, speedups: dict[str, float | None]) -> None:
    """A run whose rows are what `egg bench` writes for timed problems (a kernel at eager/speedup ms; None: none passed)."""
    names = list(speedups)
    store.create_bench_run(run_id, out_dir="/out", dirs=["KernelBench"], args={"device": "cuda", "backend": "expert backend (no model)",
                           "executor": "local", "slots": ["0"]}, items=[{"problem": n, "path": f"/{n}.py", "level": int(n[5]), "ordinal": i} for i, n in enumerate(names)])
    for name, speedup in speedups.items():
        item = BenchItemRecord(run_id, name, f"/{name}.py", int(name[5]), 0, None, "done", "", "0", 30.0, None, None, {})
        row = row_for(item, session(outcome(None if speedup is None else 1.0 / speedup)))
        store.update_bench_item(run_id, name, status="done", wall_s=30.0, row=row)
    store.update_bench_run(run_id, status="done", finished_at="2026-12-03T12:00:00")


def test_a_cpu_bench_run_lists_its_problems_each_opening_its_session(app, db, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "bench", str(TINY), "--only", "15_Swish", "--device", "cpu", "--seeds", "1",
                           "--rounds", "0", "--out", str(tmp_path / "out"), "--db", str(db)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    [run] = api.bench_runs(api.open_store(db))
    app.switch_page("pages/bench.py").run()
    assert not app.exception, [e.value for e in app.exception]
    table = app.dataframe[0].value
    [item] = api.open_store(db).bench_items(run.id)
    assert list(table["problem"]) == ["level1/15_Swish"] and list(table["status"]) == ["done"] and list(table["correct"]) == [True]
    assert list(table["session"]) == [f"./session?id={item.session_id}"]
    assert {m.label: m.value for m in app.metric}["problems ended"] == "1 / 1"
    assert any("Nothing in this run was timed" in i.value for i in app.info)
    assert not app.get("plotly_chart")  # nothing invented for an untimed run
    assert app.query_params["run"] in (run.id, [run.id])  # a reload shows the same run


def test_a_timed_run_draws_its_plots_and_two_runs_compare(app, db):
    store = api.open_store(db)
    timed_run(store, "first", {"level1/a": 2.0, "level1/b": 0.5, "level2/c": None, "level3/d": 1.2})
    timed_run(store, "second", {"level1/a": 3.0, "level1/b": 0.5, "level2/c": 1.5, "level3/d": 0.9})
    app.switch_page("pages/bench.py").run()
    app.selectbox(key="bench_pick").set_value("first").run()
    assert not app.exception, [e.value for e in app.exception]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["correct"] == "3" and metrics["fast_1 vs eager"] == "2"
    plotted = charts(app)
    fast = plotted["fast_p: % of problems"]
    eager = next(t for t in fast["data"] if t["name"] == "vs eager")
    assert eager["y"][eager["x"].index(0.0)] == 75.0 and eager["y"][eager["x"].index(1.0)] == 50.0  # 3 of 4 correct; 2 above 1x
    levels = plotted["speedup vs eager (log)"]
    assert sorted(t["name"] for t in levels["data"]) == ["level 1", "level 2", "level 3"]
    assert next(t for t in levels["data"] if t["name"] == "level 2")["y"] == [1.0]  # no kernel: the reference
    assert "geomean gain over the stage before" in plotted
    app.multiselect(key="bench_compare").set_value(["first", "second"]).run()
    compared = {r["problem"]: r["verdict"] for r in app.dataframe[1].value.to_dict("records")}
    assert compared == {"level1/a": "faster", "level1/b": "within noise", "level2/c": "faster", "level3/d": "regressed"}
