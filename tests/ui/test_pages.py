"""Every page on its own: what it shows for a stored session, and what it refuses."""

from __future__ import annotations

import json

from pipeline import api
from tests.ui.conftest import finished_session, rerun_until


def test_a_pasted_file_that_is_not_a_problem_gets_the_loaders_error_and_creates_nothing(app, db):
    app.radio(key="problem_kind").set_value("paste").run()
    app.text_area(key="problem_paste").set_value("import torch\n\nclass Model(torch.nn.Module):\n    pass\n").run()
    app.radio(key="backend_kind").set_value("none").run()
    app.button(key="start_session").click().run()
    assert any("not a KernelBench problem, it does not define get_inputs, get_init_inputs" in e.value for e in app.error)
    assert api.list_sessions(api.open_store(db)) == []


def test_the_model_call_budget_is_offered_only_where_a_model_is_called(app):
    for kind, enabled in (("expert", False), ("none", False), ("script", True), ("llm", True)):
        app.radio(key="backend_kind").set_value(kind).run()
        widget = app.number_input(key="budget_calls")
        assert widget.disabled is (not enabled), kind
        assert ("only a model or script backend" in widget.help) is (not enabled), kind


def test_a_pasted_problem_becomes_a_session_of_its_own(app, db):
    source = (api.pipeline.ROOT / "data" / "problems" / "tiny" / "level1" / "15_Swish.py").read_text()
    app.radio(key="problem_kind").set_value("paste").run()
    app.text_area(key="problem_paste").set_value(source)
    app.text_input(key="problem_paste_name").set_value("my_swish.py")
    app.radio(key="backend_kind").set_value("none").run()
    app.radio(key="device").set_value("cpu")
    app.button(key="start_session").click().run()
    store = api.open_store(db)
    [record] = api.list_sessions(store)
    assert record.problem_name == "my_swish" and store.problem_source(record.id) == source
    rerun_until(app, lambda a: a.header and a.header[0].value.startswith("Kernel gate"), what="the first gate")
    api.cancel(store, record.id)


def test_a_pasted_file_name_with_a_nul_or_over_255_bytes_is_refused_and_leaves_no_folder(app, db):
    app.radio(key="problem_kind").set_value("paste").run()
    app.text_area(key="problem_paste").set_value((api.pipeline.ROOT / "data" / "problems" / "tiny" / "level1" / "15_Swish.py").read_text())
    app.radio(key="backend_kind").set_value("none").run()
    for name, message in (("my\0swish.py", "the file name holds a NUL character"), ("s" * 300 + ".py", "the file name is 303 bytes long")):
        app.text_input(key="problem_paste_name").set_value(name)
        app.button(key="start_session").click().run()
        assert any(message in e.value for e in app.error), [e.value for e in app.error]
    assert api.list_sessions(api.open_store(db)) == [] and not (db.parent / "sessions").exists()


def test_the_candidates_page_lists_every_candidate_with_its_source_and_verdict(app, db, script):
    session_id = finished_session(db, script)
    app.switch_page("pages/candidates.py")
    app.query_params["id"] = session_id
    app.run()
    assert not app.exception
    rows = app.dataframe[0].value
    assert list(rows["id"]) == [c.id for c in api.open_store(db).candidates(session_id)]
    assert set(rows["status"]) == {"ok"}
    chosen = int(rows["id"].iloc[0])
    app.selectbox(key="candidate_pick").set_value(chosen).run()
    assert any("# variant 0" in c.value for c in app.code)  # its source
    assert any("**ok** - passed every check" in m.value for m in app.markdown)  # its verdict
    assert any("No timed stage yet" in i.value for i in app.info)  # the CPU times nothing: said, not drawn

    # the finished session's own page reads as a story: every gate, as decided, and any one drawn as it was shown
    app.switch_page("pages/session.py")
    app.query_params["id"] = session_id
    app.run()
    assert not app.exception
    story = app.dataframe[0].value
    gates = api.gates(api.open_store(db), session_id)
    assert list(story["gate"]) == list(range(1, len(gates) + 1)) and set(story["kind"]) == {"kernel", "verdict", "plan", "stage_end"}
    verdict = 1 + next(i for i, g in enumerate(gates) if g.kind == "verdict")
    app.selectbox(key="story_gate").set_value(verdict).run()
    assert any("**ok** - passed every check" in m.value for m in app.markdown)
    assert any(m.value.startswith("**Decision:** approve by auto") for m in app.markdown)


def test_the_sessions_page_compares_two_sessions_side_by_side(app, db, script):
    first, second = finished_session(db, script), finished_session(db, script, seeds=1)
    app.switch_page("pages/sessions.py").run()
    assert list(app.dataframe[0].value["id"]) == [second, first]  # newest first
    app.multiselect(key="compare_pick").set_value([first, second]).run()
    store = api.open_store(db)
    judged = [m for m in app.metric if m.label == "judged"]
    assert [int(m.value) for m in judged] == [len(api.candidate_rows(store, s)) for s in (first, second)]
    # where they parted ways: the first gate at which their gates or decisions differ (here: a second seed or not)
    parted = api.divergence(store, first, second)
    assert parted is not None and parted.number > 1
    assert any(m.value.startswith(f"**They part ways at gate {parted.number}:**") for m in app.markdown)
    gates = api.gates(store, first), api.gates(store, second)
    assert [g.key for g in gates[0][:parted.number - 1]] == [g.key for g in gates[1][:parted.number - 1]]
    # both best kernels, and their diff
    assert [m.value for m in app.metric if m.label == "best.py"] == ["not timed", "not timed"]
    assert any(c.value.startswith("against the " + first) for c in app.caption) and app.tabs


def test_the_learn_page_replays_a_recorded_session_and_scores_a_prediction(app, db, script, tmp_path, monkeypatch):
    session_id = finished_session(db, script)  # mode auto: its plan gates are rows too, decided by auto
    store = api.open_store(db)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "softmax.json").write_text(json.dumps(api.export_bundle(store, session_id)))
    other = tmp_path / "other.sqlite"
    monkeypatch.setenv("EGG_DB", str(other))
    monkeypatch.setattr(api, "RECORDED_DIR", recorded)
    app.switch_page("pages/learn.py").run()
    assert not app.exception
    [imported] = api.list_sessions(api.open_store(other))
    assert imported.id == session_id and imported.backend["recorded"]
    app.selectbox(key="replay_pick").set_value(session_id).run()
    plans = [g for g in api.open_store(other).gates(session_id) if g.kind == "plan"]
    steps = 0
    while not any(r.key and r.key.startswith("predict_") for r in app.radio):
        app.button(key="replay_next").click().run()
        steps += 1
        assert steps < 40, "no plan gate to predict"
    radio = next(r for r in app.radio if r.key.startswith("predict_"))
    radio.set_value("latency_bound").run()
    app.button(key="predict_reveal").click().run()
    assert any("the plan's top bottleneck is launch_bound" in w.value for w in app.warning)
    assert api.prediction_score(api.open_store(other), "learner") == (0, 1) and plans


def test_settings_say_which_keys_are_present_and_never_their_values(app, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-egg-test-do-not-show-1234")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    app.switch_page("pages/settings.py").run()
    table = app.dataframe[0].value
    assert dict(zip(table["variable"], table["present"])) == {"OPENAI_API_KEY": "yes", "ANTHROPIC_API_KEY": "no", "EGG_LLM_API_KEY": "no"}
    shown = " ".join(str(e.value) for kind in ("markdown", "caption", "text", "code", "error", "info") for e in app.get(kind))
    assert "sk-egg-test" not in shown and "sk-egg-test" not in table.to_string()


def test_the_session_page_says_a_kept_kernel_is_slower_than_compile_and_why(app, db):
    from pipeline.sessions.backends import BackendSpec
    from tests.ui.conftest import SOFTMAX

    store = api.open_store(db)
    record = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("none"), review="auto", device="cpu")
    note = "slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): the kernel takes 5.0x its physical floor of 200 us"
    store.update_session(record.id, status="done", outcome={"headline": "a verified kernel, 2.000x vs eager, 0.700x vs compile",
                                                            "keeps_reference": False, "best_is_reference": False, "versus_compile": note})
    app.switch_page("pages/session.py")
    app.query_params["id"] = record.id
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert any(w.value == note for w in app.warning), [w.value for w in app.warning]
    assert any(s.value.startswith("a verified kernel") for s in app.success)
