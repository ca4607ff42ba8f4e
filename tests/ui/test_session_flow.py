"""An expert's session through the pages: created on New session, then every gate decided on the Session page
(approve, edit, reject with feedback, a bad plan refused in place, stop), then exported and branched."""

from __future__ import annotations

import time

import json

from streamlit.testing.v1 import AppTest

from pipeline import api
from tests.ui.conftest import SOFTMAX, header, rerun_until
from tests.ui.scripted import DIAGNOSIS


def start_session(at: AppTest, script, review: str = "every") -> str:
    path = str(SOFTMAX)
    at.selectbox(key="problem_bundled").set_value(path)
    at.radio(key="backend_kind").set_value("script").run()
    at.text_input(key="backend_script").set_value(str(script))
    at.radio(key="device").set_value("cpu")
    at.radio(key="review").set_value(review)
    at.number_input(key="budget_seeds").set_value(1)
    at.number_input(key="budget_rounds").set_value(1)
    at.number_input(key="budget_debug").set_value(0)
    at.button(key="start_session").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at.query_params["id"][0] if isinstance(at.query_params["id"], list) else at.query_params["id"]


def at_gate(at: AppTest, title: str) -> AppTest:
    return rerun_until(at, lambda a: header(a).startswith(title), what=title)


def editor(at: AppTest):
    return next(t for t in at.text_area if t.key.endswith("_text"))


def decide(at: AppTest, action: str, feedback: str = "") -> None:
    if feedback:
        at.text_area(key="gate_feedback").set_value(feedback)
    at.button(key=f"gate_{action}").click().run()


def test_an_expert_walks_a_session_through_its_gates(app, db, script):
    session_id = start_session(app, script)
    store = api.open_store(db)
    at_gate(app, "Kernel gate · algorithm")
    assert any("rationale of variant 0" in m.value for m in app.markdown)  # the proposal's rationale, named
    assert any(t.key == "gate_feedback" for t in app.text_area)
    decide(app, "approve")
    at_gate(app, "Verdict gate · algorithm")
    assert any("**ok** - passed every check" in m.value for m in app.markdown) and app.dataframe  # every check, in a table
    judged = next(e for e in app.expander if e.label.startswith("the kernel judged, against the reference problem"))
    assert any("# variant 0" in c.value for c in judged.code)  # the seed beside the problem it replaces
    decide(app, "approve")

    gate = at_gate(app, "Kernel gate · algorithm")  # the transformation
    first_transform = header(gate)
    decide(app, "reject", feedback="fuse the max and the sum into one pass")
    rerun_until(app, lambda a: header(a).startswith("Kernel gate") and header(a) != first_transform, what="a new proposal")
    # the new proposal says what it answers and shows the prompt the feedback went into
    rejected_number = int(first_transform.rsplit("gate ", 1)[1])
    assert any(f"answers your feedback at gate {rejected_number}" in i.value and "fuse the max and the sum" in i.value
               and "verbatim into the prompt of 1 model call(s) (code)" in i.value for i in app.info), [i.value for i in app.info]
    prompt = next(e for e in app.expander if e.label.startswith("the prompt it went into: code call"))
    assert any("fuse the max and the sum into one pass" in c.value for c in prompt.code)
    edited = editor(app).value.replace("# variant 2", "# variant 2, edited by the expert")
    editor(app).set_value(edited)
    decide(app, "edit")
    at_gate(app, "Verdict gate · algorithm")
    decide(app, "approve")
    at_gate(app, "Stage end · algorithm")
    decide(app, "approve")

    at_gate(app, "Plan gate · parallel_mapping")
    assert app.toggle(key="profile_expert") is not None  # the novice / expert views of the report
    editor(app).set_value('{"bottlenecks": [{"name": "memory_bound", "evidence": [], "fixes": []}]}')
    decide(app, "edit")
    assert any("not a valid Diagnosis" in e.value and "evidence" in e.value for e in app.error)  # refused, in place
    assert header(app).startswith("Plan gate · parallel_mapping")
    better = {"bottlenecks": [{**DIAGNOSIS["bottlenecks"][0], "name": "latency_bound"}]}
    editor(app).set_value(json.dumps(better))
    decide(app, "edit")
    at_gate(app, "Kernel gate · parallel_mapping")
    assert any("answers your edited plan at gate" in i.value and "latency_bound" in i.value for i in app.info), [i.value for i in app.info]
    # one look: the plan it implements and its parent's verdict above the diff, the decision bar above them all
    assert any(m.value.startswith("*the plan it implements:*") and "**latency_bound**" in m.value for m in app.markdown)
    assert any(m.value.startswith("*its parent, candidate ") and "**ok**" in m.value for m in app.markdown)
    assert app.button(key="gate_approve").proto.shortcut == "alt+a" and not app.button(key="gate_approve").disabled
    decide(app, "approve")
    at_gate(app, "Verdict gate · parallel_mapping")
    decide(app, "approve")
    at_gate(app, "Stage end · parallel_mapping")
    decide(app, "approve")
    at_gate(app, "Plan gate · tiling")
    decide(app, "approve")
    at_gate(app, "Kernel gate · tiling")
    decide(app, "skip")
    at_gate(app, "Stage end · tiling")
    decide(app, "stop")
    rerun_until(app, lambda a: any("a verified kernel" in s.value for s in a.success), what="the outcome")

    decisions = store.decisions(session_id)
    assert [d.action for d in decisions] == ["approve", "approve", "reject", "edit", "approve", "approve", "edit", "approve", "approve",
                                             "approve", "approve", "skip", "stop"]
    assert decisions[2].feedback == "fuse the max and the sum into one pass"
    assert "edited by the expert" in decisions[3].after
    assert decisions[6].after["bottlenecks"][0]["name"] == "latency_bound"
    authors = {c.author for c in store.candidates(session_id)}
    assert "person" in authors  # the edited kernel is a candidate of its own, judged

    app.switch_page("pages/sessions.py").run()
    app.selectbox(key="sessions_pick").set_value(session_id).run()
    assert sorted(d.label for d in app.get("download_button")) == ["Download best.py", "Download evidence.json", "Download report.md"]
    plan_gate = next(g for g in store.gates(session_id) if g.kind == "plan")
    app.selectbox(key="branch_gate").set_value(plan_gate.id)
    app.button(key="sessions_branch").click().run()
    branch = next(s for s in store.sessions() if s.parent_id == session_id)
    assert branch.branch_gate_key == plan_gate.key and any(branch.id in m.value for m in app.success)
    deadline = time.monotonic() + 120  # the branch got its worker: it waits at the gate it was branched from
    while time.monotonic() < deadline and not store.open_gate_ids(branch.id):
        time.sleep(0.3)
    assert store.open_gate_ids(branch.id), store.session(branch.id)
    app.selectbox(key="sessions_pick").set_value(branch.id).run()
    app.button(key="sessions_cancel").click().run()  # inside the Cancel popover: the confirmation
    assert store.session(branch.id).cancel_requested
    assert list(app.dataframe[0].value.set_index("id").loc[[branch.id], "status"]) in (["cancelling"], ["cancelled"])
