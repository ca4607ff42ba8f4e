"""Learn: a lesson per stage; recorded sessions (measured on an H200) replayed gate by gate with no GPU and no model;
and "predict the bottleneck before the plan is shown", scored and stored."""

from __future__ import annotations

import streamlit as st

from components.gate import Context, render_gate_body
from components.lessons import LESSONS, PREDICTABLE, answer, render_lesson, top_bottleneck
from pages._context import gate_context, store
from pipeline import api
from pipeline.expert.knowledge import topic
from pipeline.sessions.gatekinds import Gate
from pipeline.store.records import SessionRecord


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


def predict(record: SessionRecord, gate: Gate) -> None:
    """The learner's guess, scored against the plan's top bottleneck and kept in the store."""
    guess = st.session_state.get(f"predict_{gate.id}")
    actual = answer(gate.data.proposal, gate.data.report_kind) or ""
    api.record_prediction(store(), record.id, gate.key, st.session_state["who"], guess, actual)
    st.session_state[f"revealed_{gate.id}"] = guess


def render_plan_replay(record: SessionRecord, gate: Gate, context: Context) -> None:
    """The plan gate as a question first: the report's numbers, a prediction, then the plan and the answer."""
    p = gate.data
    revealed = st.session_state.get(f"revealed_{gate.id}")
    if p.proposal is not None and revealed is None:  # while the learner predicts: the numbers, not the profiler's class
        render_gate_body(gate, context, expert_key=f"expert_{gate.id}", hide_answer=True)
        st.markdown("**Before the plan is shown: what limits this kernel?** Read the numbers above: the speed-of-light bars, "
                    "occupancy, waves.")
        st.radio("your prediction", PREDICTABLE, key=f"predict_{gate.id}", horizontal=True, index=None)
        st.button("Reveal the plan", key="predict_reveal", on_click=predict, args=(record, gate),
                  disabled=st.session_state.get(f"predict_{gate.id}") is None, help="choose a prediction first")
        return
    if p.proposal is not None:
        actual, named = answer(p.proposal, p.report_kind), top_bottleneck(p.proposal)
        said = f"the plan's top bottleneck is {named}" + ("" if named == actual else f"; the profiler measured {actual}")
        (st.success if revealed == actual else st.warning)(f"you said {revealed}; {said}")
        overall = (p.report or {}).get("overall") or {}
        if revealed != actual and p.report:
            why = "; ".join(f"{e['metric']} = {e['value'] if isinstance(e['value'], str) else format(e['value'], '.4g')}: {e['meaning']}"
                            for e in overall.get("evidence", [])[:4])
            st.markdown(f"**Why {actual}:** {overall.get('summary', '')}" + (f" The evidence: {why}." if why else ""))
    render_gate_body(gate, context, expert_key=f"expert_{gate.id}")


def render_gate_replay(record: SessionRecord, gate: Gate, number: int) -> None:
    """A recorded gate through the same renderer as the Session page's (read-only), and the decision taken."""
    st.subheader(f"{gate.spec.title} · {gate.stage} · gate {number}")
    context = gate_context(record)
    if gate.kind == "plan":
        render_plan_replay(record, gate, context)
    else:
        render_gate_body(gate, context)
    hidden = gate.kind == "plan" and st.session_state.get(f"revealed_{gate.id}") is None and gate.data.proposal is not None
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
    gates = api.gates(store(), chosen)
    if not gates:
        st.info("this recording has no gates")
        return
    index = min(st.session_state["replay_index"], len(gates) - 1)
    left, middle, right = st.columns([1, 3, 1])
    left.button("previous", icon=":material/arrow_back:", key="replay_prev", on_click=step, args=(-1, len(gates)), disabled=index == 0)
    middle.progress((index + 1) / len(gates), text=f"gate {index + 1} of {len(gates)}")
    right.button("next", icon=":material/arrow_forward:", key="replay_next", on_click=step, args=(1, len(gates)), disabled=index == len(gates) - 1)
    render_gate_replay(record, gates[index], index + 1)
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
