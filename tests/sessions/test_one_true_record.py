"""Whatever the person chose is what every record says: best.py, report.md, evidence.json, the session's outcome, the
stage line and the Candidates page agree after a stage-end edit of the best kernel, stopped stages and a rejected
verdict."""

from __future__ import annotations

import json
import os
import time

from components.session import stage_states
from pipeline import api
from pipeline.sessions.backends import BackendSpec
from pipeline.stages.method import Budget
from pipeline.types import EvalOptions
from tests.sessions.driver import SOFTMAX
from tests.sessions.test_decisions_reach_agents import wait_open_gate

CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)


def candidates_page_kept(db, session_id: str) -> dict[int, str]:
    """The Candidates page's `kept` column, by candidate id, as the page draws it."""
    from streamlit.testing.v1 import AppTest

    from tests.ui.conftest import APP

    os.environ["EGG_DB"] = str(db)
    try:
        app = AppTest.from_file(str(APP), default_timeout=60)
        app.run()
        app.switch_page("pages/candidates.py")
        app.query_params["id"] = session_id
        app.run()
    finally:
        del os.environ["EGG_DB"]
    assert not app.exception, app.exception
    rows = app.dataframe[0].value
    return dict(zip(map(int, rows["id"]), rows["kept"]))


def test_the_records_agree_with_the_persons_choices(tmp_path):
    store = api.open_store(tmp_path / "egg.sqlite")
    session = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("expert"), review="every", device="cpu",
                                 budget=Budget(seeds=2, rounds=1, debug_rounds=0, transforms=False), options=CPU)
    api.start_worker(store, session.id)
    stage_ends: dict[str, dict] = {}
    while (gate := wait_open_gate(store, session.id)) is not None:
        if gate.kind == "stage_end":
            stage_ends[gate.stage] = gate.payload
        if gate.kind == "stage_end" and gate.stage == "algorithm":
            assert gate.payload["proposal"]["best_id"] == 1 and [c["id"] for c in gate.payload["choices"]] == [1, 2]
            chosen = {**gate.payload["proposal"], "best_id": 2}  # the person goes on from the second seed
            api.decide(store, session.id, gate.id, "edit", edit_text=json.dumps(chosen))
        elif gate.kind == "plan" and gate.stage in ("parallel_mapping", "memory"):
            api.decide(store, session.id, gate.id, "stop")  # these two stages stopped by the person
        else:
            api.decide(store, session.id, gate.id, "approve")
    record = api.get_session(store, session.id)
    assert record.status == "done", api.events(store, session.id)[-5:]

    second = store.candidate_source(2)
    files = api.export_files(store, session.id)
    assert second in files["best.py"].decode()
    report = files["report.md"].decode()
    assert "best.py is candidate 2." in report
    rows = {line.split("|")[1].strip(): line.split("|")[6].strip() for line in report.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")}
    assert rows == {"1": "", "2": "yes"}  # the kept one is the person's choice, not the one it replaced
    evidence = json.loads(files["evidence.json"])
    assert evidence["best_id"] == 2
    assert {d["stage"]: d["candidate_id"] for d in evidence["decisions"]}["algorithm"] == 2
    assert [a["candidate_id"] for a in evidence["attempts"] if a["accepted"]] == [2]
    assert record.outcome["best_id"] == 2
    states = {s.name: s.state for s in stage_states(record.stage, store.decided_stage_ends(session.id), record.status,
                                                     store.stage_outcomes(session.id))}
    assert states == {"algorithm": "done", "parallel_mapping": "stopped", "tiling": "done", "memory": "stopped"}
    assert stage_ends["memory"]["last_stage"] and not stage_ends["tiling"]["last_stage"]
    kept = candidates_page_kept(tmp_path / "egg.sqlite", session.id)
    assert kept[1] == "" and kept[2].split(", ")[0] == "algorithm" and kept[2].endswith("best.py"), kept
    assert [i for i, k in kept.items() if "best.py" in k] == [2]


def test_a_rejected_verdict_is_not_offered_as_a_choice_and_a_cancelled_session_shows_where_it_ended(tmp_path):
    store = api.open_store(tmp_path / "egg.sqlite")
    session = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("expert"), review="every", device="cpu",
                                 budget=Budget(seeds=2, rounds=1, debug_rounds=0, transforms=False), options=CPU)
    api.start_worker(store, session.id)
    verdicts = 0
    while (gate := wait_open_gate(store, session.id)) is not None:
        if gate.kind == "verdict":
            verdicts += 1
            api.decide(store, session.id, gate.id, "reject" if verdicts == 2 else "approve", feedback="not this one")
        elif gate.kind == "stage_end":
            assert [c["id"] for c in gate.payload["choices"]] == [1]  # candidate 2's verdict was rejected
            api.cancel(store, session.id)
            break
        else:
            api.decide(store, session.id, gate.id, "approve")
    deadline = time.monotonic() + 60
    while not (record := api.get_session(store, session.id)).finished and time.monotonic() < deadline:
        time.sleep(0.2)
    assert record.status == "cancelled"
    states = [s.state for s in stage_states(record.stage, store.decided_stage_ends(session.id), record.status, store.stage_outcomes(session.id))]
    assert states == ["cancelled", "not reached", "not reached", "not reached"]
    kept = candidates_page_kept(tmp_path / "egg.sqlite", session.id)
    assert set(kept) == {1, 2} and not any(kept.values()), kept  # nothing handed on, no best.py: the session was cancelled
