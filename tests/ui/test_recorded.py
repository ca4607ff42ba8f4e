"""The recorded sessions bundled in data/recorded: real H200 runs (NCU reports, timed verdicts) that replay with no GPU
and no model, in the Learn page and in `egg session replay`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline import api
from tests.ui.conftest import ROOT

BUNDLES = sorted((ROOT / "data" / "recorded").glob("*.json"))


def test_at_least_three_problems_are_recorded():
    problems = {json.loads(p.read_text())["session"]["problem_name"] for p in BUNDLES}
    assert len(problems) >= 3, problems


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.stem)
def test_a_recording_holds_real_ncu_reports_and_timed_verdicts(bundle, tmp_path):
    store = api.open_store(tmp_path / "egg.sqlite")
    data = json.loads(bundle.read_text())
    record = api.import_bundle(store, data)
    assert record.status == "done" and record.review == "plans" and "H200" in data["note"]
    plans = [g for g in store.gates(record.id) if g.kind == "plan"]
    assert [g.stage for g in plans] == ["parallel_mapping", "tiling", "memory"]
    for gate in plans:
        report = gate.payload["report"]
        assert report["source"] == "ncu" and "H200" in report["ceilings"]["device"] and report["ceilings"]["source"] == "measured"
        assert report["kernels"][0]["metrics"]  # the raw counters are there for the expert view
    rows = api.candidate_rows(store, record.id)
    assert rows and all(r.status is not None for r in rows) and all(r.median_ms for r in rows if r.status == "ok")
    # a win, or (the recorded 3x3 convolution) the honest story of a loss: best.py is the reference, and says so
    assert record.outcome["speedups"]["eager"] > 1 or (record.outcome["keeps_reference"] and "nothing beat the reference" in record.outcome["headline"])
    assert api.import_bundle(store, data).id == record.id and len(api.list_sessions(store)) == 1  # imported once


def test_recordings_imported_into_a_busy_store_point_at_their_own_candidates(tmp_path):
    """A store numbers candidates and gates anew; every id a recording's gates, decisions, events and outcome hold
    must name this session's own rows, not whatever holds the recorded number here."""
    store = api.open_store(tmp_path / "egg.sqlite")
    records = [api.import_bundle(store, json.loads(b.read_text())) for b in BUNDLES]
    assert len({c.id for r in records for c in store.candidates(r.id)}) == sum(len(store.candidates(r.id)) for r in records)
    for record in records[1:]:  # numbered after the first recording's rows: none keeps its recorded ids
        own = {c.id for c in store.candidates(record.id)}
        gates = store.gates(record.id)
        referenced = set()
        for gate in gates:
            payload = gate.payload
            referenced |= {payload[k] for k in ("candidate_id", "best_id", "parent_id") if isinstance(payload.get(k), int)}
            referenced |= {c["id"] for c in payload.get("choices", [])}
            if gate.kind == "verdict":
                assert store.candidate_source(payload["candidate_id"]) is not None
        referenced.add(record.outcome["best_id"])
        assert referenced and referenced <= own, (record.problem_name, sorted(referenced - own))
        gate_ids = {g.id for g in gates}
        events = api.events(store, record.id)
        assert {e.data["gate_id"] for e in events if "gate_id" in e.data} <= gate_ids
        assert {e.data["candidate_id"] for e in events if "candidate_id" in e.data} <= own


def test_egg_session_replays_a_recording_gate_by_gate_offline(tmp_path):
    db = tmp_path / "egg.sqlite"
    run = lambda *args: subprocess.run([sys.executable, "-m", "pipeline.cli", "session", *args, "--db", str(db)],
                                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    imported = run("import")
    assert imported.returncode == 0, imported.stderr
    softmax = next(line.split()[0] for line in imported.stdout.splitlines() if "23_Softmax" in line)
    replay = run("replay", softmax)
    assert replay.returncode == 0, replay.stderr
    lines = replay.stdout.splitlines()
    assert any("parallel_mapping / plan:" in line and "profiler (ncu): memory_bound" in line for line in lines)
    assert any("/ verdict: candidate" in line and "x vs eager" in line for line in lines)


def test_the_learn_page_scores_a_prediction_against_a_real_ncu_measurement(app, db):
    app.switch_page("pages/learn.py").run()
    sessions = {s.problem_name: s.id for s in api.list_sessions(api.open_store(db))}
    app.selectbox(key="replay_pick").set_value(sessions["23_Softmax"]).run()
    while not any(r.key and r.key.startswith("predict_") for r in app.radio):
        app.button(key="replay_next").click().run()
    next(r for r in app.radio if r.key.startswith("predict_")).set_value("memory_bound").run()
    app.button(key="predict_reveal").click().run()
    assert any("you said memory_bound" in s.value and "the profiler measured memory_bound" in s.value for s in app.success)
    assert api.prediction_score(api.open_store(db), "learner") == (1, 1)


def test_the_learn_page_hides_the_answer_until_the_guess_and_explains_a_wrong_one(app, db):
    app.switch_page("pages/learn.py").run()
    sessions = {s.problem_name: s.id for s in api.list_sessions(api.open_store(db))}
    app.selectbox(key="replay_pick").set_value(sessions["23_Softmax"]).run()
    while not any(r.key and r.key.startswith("predict_") for r in app.radio):
        app.button(key="replay_next").click().run()
    radio = next(r for r in app.radio if r.key.startswith("predict_"))
    shown = " ".join(m.value for m in app.markdown)
    assert radio.value is None and app.button(key="predict_reveal").disabled  # nothing chosen for the learner
    assert "memory_bound" not in shown and "**memory_bound**" not in shown  # the profiler's class is not on screen
    assert all("meaning" not in frame.value.columns for frame in app.dataframe)  # nor the evidence's reading of it
    radio.set_value("compute_bound_fma").run()
    app.button(key="predict_reveal").click().run()
    assert any("you said compute_bound_fma" in w.value for w in app.warning)
    assert any(m.value.startswith("**Why memory_bound:**") and "The evidence:" in m.value for m in app.markdown)
    assert any("**memory_bound**" in m.value for m in app.markdown)  # and now the report says it


def test_the_candidates_page_of_a_recorded_h200_session_draws_its_roof(app, db):
    """The recorded sessions' problems have no FLOPs the counter sees (softmax, layernorm, GELU): the roof drawn is
    the measured memory roof, with every timed candidate's effective bandwidth under it."""
    store = api.open_store(db)
    record = next(r for r in (api.import_bundle(store, json.loads(b.read_text())) for b in BUNDLES) if r.problem_name == "23_Softmax")
    app.switch_page("pages/candidates.py")
    app.query_params["id"] = record.id
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert len(app.get("plotly_chart")) == 1  # one plot at a time: the per-stage gains first
    app.segmented_control(key="candidates_plot").set_value("Roofline").run()
    assert not any("No roofline yet" in i.value for i in app.info)
    figures = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    roof = next(f for f in figures if "memory roof" in f["layout"].get("title", {}).get("text", ""))
    achieved = roof["data"][0]["y"]
    ceiling = roof["layout"]["shapes"][0]["y0"]
    assert len(achieved) == len(api.candidate_rows(store, record.id)) and all(0 < a <= ceiling * 1.05 for a in achieved)
    assert "H200" in roof["layout"]["title"]["text"]


def test_the_learn_replay_walks_through_verdicts_and_stage_ends(app, db):
    app.switch_page("pages/learn.py").run()
    sessions = {s.problem_name: s.id for s in api.list_sessions(api.open_store(db))}
    app.selectbox(key="replay_pick").set_value(sessions["23_Softmax"]).run()
    seen = set()
    for _ in range(60):
        seen |= {h.value.split(" ·")[0] for h in app.subheader}
        if app.button(key="replay_next").disabled:
            break
        app.button(key="replay_next").click().run()
        assert not app.exception
    assert {"Plan gate", "Kernel gate", "Verdict gate", "Stage end"} <= seen, seen


def test_the_learners_name_survives_a_visit_to_another_page(app, db):
    app.switch_page("pages/learn.py").run()
    app.text_input(key="who").set_value("ada").run()
    app.switch_page("pages/sessions.py").run()
    app.switch_page("pages/learn.py").run()
    assert app.text_input(key="who").value == "ada"


def test_the_recordings_predictions_have_different_answers(tmp_path):
    """Learn's quiz is no quiz if every plan gate has the same answer: the recordings cover memory-bound row
    kernels, a tensor-core GEMM, an FMA-bound fp32 GEMM and a launch-bound small problem."""
    from components.lessons import answer

    store = api.open_store(tmp_path / "egg.sqlite")
    answers = {}
    for record in api.import_recorded(store):
        for gate in api.gates(store, record.id, kind="plan"):
            answers.setdefault(answer(gate.data.proposal, gate.data.report_kind), set()).add(record.problem_name)
    assert {"memory_bound", "compute_bound_tensor", "compute_bound_fma", "launch_bound"} <= set(answers), answers


def test_a_stage_end_accounts_for_what_got_faster_what_got_slower_and_why(tmp_path):
    """The recorded GELU: the fused seed 3.50x faster than eager against 1.16x for three kernels, and every later
    stage's rewrite slower than the kernel it started from, each with what it tried."""
    from components.gate import account_lines

    store = api.open_store(tmp_path / "egg.sqlite")
    record = api.import_bundle(store, json.loads((ROOT / "data" / "recorded" / "gelu_scale_bias_h200.json").read_text()))
    seeds = api.stage_account(store, record.id, "algorithm")
    by_ratio = sorted((round(s.ratio, 2), s.against) for s in seeds.steps if s.origin == "seed")
    assert by_ratio == [(1.16, "eager"), (3.5, "eager")]
    for stage in ("parallel_mapping", "tiling", "memory"):
        account = api.stage_account(store, record.id, stage)
        assert account.steps and account.count("slower") == len(account.steps), account
        lines = account_lines(account)
        assert lines[0] == f"**{stage}: 1 candidate, against its parent: 1 slower**"
        assert "x slower** than candidate" in lines[1] and f"({account.steps[0].tried[:20]}" in lines[1]
    assert api.stage_account(store, record.id, "nothing").headline() == "nothing: no candidate was made"
