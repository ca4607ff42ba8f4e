"""Learn: a lesson per stage; recorded sessions (measured on an H200) replayed gate by gate with no GPU and no model;
and "predict the bottleneck before the plan is shown", scored and stored."""

from __future__ import annotations

import streamlit as st

from components.diff import render_diff
from components.gate import render_kernel_proposal, render_stage_end
from components.lessons import LESSONS, PREDICTABLE, answer, render_lesson, top_bottleneck
from components.plan import render_plan
from components.profile import render_profile
from components.verdict import render_verdict
from pages._context import store
from pipeline import api
from pipeline.agents.replies import Diagnosis
from pipeline.expert.knowledge import topic
from pipeline.profiler.report import ProfileReport
from pipeline.store.records import GateRecord, SessionRecord
from pipeline.types import EvalResult, from_jsonable


def init_page_state() -> None:
    st.session_state.setdefault("replay_index", 0)
    # the name lives in a key of its own: a widget's key is dropped when another page is shown, and the name with it
    st.session_state.setdefault("learner_name", "learner")
    st.session_state["who"] = st.session_state["learner_name"]


@st.cache_data(ttl=60)
def _imported(db: str) -> list[str]:
    return [r.id for r in api.import_recorded(store())]


def recorded() -> list[SessionRecord]:
    ids = _imported(str(store().path))
    return [store().session(i) for i in ids]


def render_lessons() -> None:
    tabs = st.tabs([lesson.title.split(": ")[1] for lesson in LESSONS])
    for tab, lesson in zip(tabs, LESSONS):
        with tab:
            render_lesson(lesson, "\n\n".join(topic(name) for name in lesson.topics))


def predict(record: SessionRecord, gate: GateRecord) -> None:
    """The learner's guess, scored against the plan's top bottleneck and kept in the store."""
    guess = st.session_state.get(f"predict_{gate.id}")
    actual = answer(gate.payload.get("proposal"), report_kind(gate)) or ""
    api.record_prediction(store(), record.id, gate.key, st.session_state["who"], guess, actual)
    st.session_state[f"revealed_{gate.id}"] = guess


def report_kind(gate: GateRecord) -> str | None:
    report = gate.payload.get("report") or {}
    return (report.get("overall") or {}).get("kind")


def render_plan_replay(record: SessionRecord, gate: GateRecord) -> None:
    report = gate.payload.get("report")
    plan = gate.payload.get("proposal")
    revealed = st.session_state.get(f"revealed_{gate.id}")
    asking = bool(plan) and revealed is None
    if report:  # while the learner predicts: the numbers, not the profiler's class
        render_profile(from_jsonable(ProfileReport, report), expert=st.toggle("expert view", key=f"expert_{gate.id}"), hide_verdict=asking)
    if asking:
        st.markdown("**Before the plan is shown: what limits this kernel?** Read the numbers above: the speed-of-light bars, "
                    "occupancy, waves.")
        st.radio("your prediction", PREDICTABLE, key=f"predict_{gate.id}", horizontal=True, index=None)
        st.button("Reveal the plan", key="predict_reveal", on_click=predict, args=(record, gate),
                  disabled=st.session_state.get(f"predict_{gate.id}") is None, help="choose a prediction first")
        return
    if plan:
        actual, named = answer(plan, report_kind(gate)), top_bottleneck(plan)
        said = f"the plan's top bottleneck is {named}" + ("" if named == actual else f"; the profiler measured {actual}")
        (st.success if revealed == actual else st.warning)(f"you said {revealed}; {said}")
        if revealed != actual and report:
            overall = (report.get("overall") or {})
            why = "; ".join(f"{e['metric']} = {e['value'] if isinstance(e['value'], str) else format(e['value'], '.4g')}: {e['meaning']}"
                            for e in overall.get("evidence", [])[:4])
            st.markdown(f"**Why {actual}:** {overall.get('summary', '')}" + (f" The evidence: {why}." if why else ""))
        render_plan(Diagnosis.model_validate(plan))
    else:
        st.info(f"no plan was proposed here: {gate.payload.get('note', '')}")


def render_gate_replay(record: SessionRecord, gate: GateRecord) -> None:
    payload = gate.payload
    st.subheader(f"{gate.kind} gate · {gate.stage}")
    if gate.kind == "plan":
        render_plan_replay(record, gate)
    elif gate.kind == "kernel":
        render_kernel_proposal(payload)
        if payload.get("proposal"):
            render_diff(payload.get("parent_source") or "", payload["proposal"])
    elif gate.kind == "verdict":
        render_verdict(from_jsonable(EvalResult, payload["verdict"]))
    else:
        render_stage_end(payload)
    hidden = gate.kind == "plan" and st.session_state.get(f"revealed_{gate.id}") is None and payload.get("proposal")
    if gate.decision is not None and not hidden:
        d = gate.decision
        st.markdown(f"**Decision:** {d.action} by {d.who}" + (f" - {d.feedback}" if d.feedback else ""))
    elif gate.decision is None and not gate.reviewed and not hidden:
        st.caption("not reviewed in this session's review mode: it went on as proposed")


def step(delta: int, count: int) -> None:
    st.session_state["replay_index"] = min(max(0, st.session_state["replay_index"] + delta), count - 1)


def replayable() -> list[SessionRecord]:
    """The bundled recordings first, then every other finished session of the store (a person's own included)."""
    bundled = recorded()
    seen = {s.id for s in bundled}
    return bundled + [s for s in api.list_sessions(store(), limit=200) if s.status == "done" and s.id not in seen]


def render_replay() -> None:
    sessions = replayable()
    if not sessions:
        st.info("No recorded session is bundled in data/recorded, and no session of this store has finished.")
        return
    labels = {s.id: f"{'recorded' if s.backend.get('recorded') else 'yours'} · {s.problem_name} · {s.backend.get('describe', '')} · {s.outcome.get('headline', '')}"
              for s in sessions}
    chosen = st.selectbox("Session to replay", list(labels), format_func=labels.get, key="replay_pick", on_change=lambda: st.session_state.update(replay_index=0))
    record = store().session(chosen)
    # every gate, decided by a person or passed by the review mode: verdicts and stage ends are the outcomes of the plans
    gates = store().gates(chosen)
    if not gates:
        st.info("this recording has no gates")
        return
    index = min(st.session_state["replay_index"], len(gates) - 1)
    left, middle, right = st.columns([1, 3, 1])
    left.button("previous", icon=":material/arrow_back:", key="replay_prev", on_click=step, args=(-1, len(gates)), disabled=index == 0)
    middle.progress((index + 1) / len(gates), text=f"gate {index + 1} of {len(gates)}")
    right.button("next", icon=":material/arrow_forward:", key="replay_next", on_click=step, args=(1, len(gates)), disabled=index == len(gates) - 1)
    render_gate_replay(record, gates[index])
    right_answers, total = api.prediction_score(store(), st.session_state["who"])
    st.caption(f"{st.session_state['who']}'s predictions: {right_answers} of {total} right")


def render() -> None:
    st.title("Learn")
    st.text_input("Your name (for the prediction score)", key="who",
                  on_change=lambda: st.session_state.update(learner_name=st.session_state["who"] or "learner"))
    lessons_tab, replay_tab = st.tabs(["The stages", "Recorded sessions"])
    with lessons_tab:
        render_lessons()
    with replay_tab:
        render_replay()


init_page_state()
render()
