"""Session: the four stages as a progress line, the live timeline, and the pending gate with what it shows (the
bottleneck report and plan, the kernel's diff, the verdict, or what travels at a stage's end) and the decisions."""

from __future__ import annotations

from textwrap import shorten

import streamlit as st

from components.gate import Allowed, decision_controls, render_gate_body
from components.plan import validate_plan
from components.session import render_outcome, render_stage_progress, render_timeline, stage_states
from components.style import apply as apply_style
from pages._context import gate_context, session_from_url, store
from pipeline import api
from pipeline.sessions.gatekinds import Gate
from pipeline.store.records import GateRecord, SessionRecord

LIVE_EVERY_S = 0.3  # the fragment's poll: a new gate is on screen well within a second


def init_page_state() -> None:
    st.session_state.setdefault("decide_error", "")
    st.session_state.setdefault("profile_expert", False)


def editor_key(gate: GateRecord) -> str:
    return f"gate_{gate.id}_text"


def decide(session_id: str, gate: GateRecord, action: str) -> None:
    """A decision button's callback: validate and append the decision (the worker picks it up)."""
    state = st.session_state
    edit_text = state.get(editor_key(gate)) if action == "edit" else None
    if action == "edit" and gate.kind == "plan":
        _, error = validate_plan(edit_text or "")
        if error:
            state["decide_error"] = error
            return
    try:
        api.decide(store(), session_id, gate.id, action, edit_text=edit_text, feedback=state.get("gate_feedback", ""), who=state.get("who", "person"))
    except api.ApiError as error:
        state["decide_error"] = str(error)
        return
    state["decide_error"] = ""
    state["gate_feedback"] = ""


def render_gate(record: SessionRecord, gate: Gate) -> None:
    """The decision bar first (no scrolling to decide), then the evidence: what the gate answers, and its body."""
    number = api.gate_number(store(), gate)  # this session's own count
    st.header(f"{gate.spec.title} · {gate.stage} · gate {number}", help=f"gate id {gate.id} (egg gate decide {record.id} {gate.id} ...)")
    st.caption(gate.summary)
    heard = record.backend.get("kind") != "none"
    decision_controls(gate.kind, Allowed.of(gate, feedback_heard=heard), lambda action: decide(record.id, gate, action))
    if st.session_state["decide_error"]:
        st.error(st.session_state["decide_error"])
    render_gate_body(gate, gate_context(record), editor_key=editor_key(gate))


def render_story(record: SessionRecord) -> None:
    """A finished session as it was decided: every gate in a table (what it showed, the decision, who, why), and
    any one of them drawn as it was shown, read-only."""
    gates = api.gates(store(), record.id)
    if not gates:
        return
    st.subheader("Every gate, as it was decided")
    table = [{"gate": n, "kind": g.kind, "stage": g.stage, "what it showed": shorten(g.summary, 160, placeholder=' ...'),
              "decision": g.decision.action if g.decision else "open", "by": g.decision.who if g.decision else "",
              "feedback": shorten(g.decision.feedback if g.decision and g.decision.feedback else "", 120, placeholder=' ...')} for n, g in enumerate(gates, 1)]
    st.dataframe(table, hide_index=True, width="stretch", height=min(36 * (len(table) + 1) + 2, 420))
    reviewed = [n for n, g in enumerate(gates, 1) if g.reviewed] or list(range(1, len(gates) + 1))
    number = st.selectbox("Look at gate", list(range(1, len(gates) + 1)), index=reviewed[0] - 1, key="story_gate",
                          format_func=lambda n: f"gate {n} · {gates[n - 1].spec.title.lower()} · {gates[n - 1].stage} · "
                                                f"{gates[n - 1].decision.action if gates[n - 1].decision else 'open'}")
    gate = gates[number - 1]
    render_gate_body(gate, gate_context(record))
    if gate.decision is not None:
        d = gate.decision
        st.markdown(f"**Decision:** {d.action} by {d.who}" + (f": {d.feedback}" if d.feedback else "")
                    + ("" if gate.reviewed else " (not reviewed in this session's review mode)"))


def render_header(record: SessionRecord, alive: bool) -> None:
    st.title(f"{record.problem_name}" + (f" · {record.label}" if record.label else ""))
    worker = "worker running" if alive else ("no worker" if not record.finished else "")
    st.caption(f"session {record.id} · {record.status}" + (f" ({worker})" if worker else "") +
               f" · backend {record.backend.get('describe', record.backend.get('kind'))} · review {record.review} · device {record.device}")
    if record.error:
        st.error(record.error)
    render_outcome(record.outcome)
    buttons = st.columns(4)
    if record.resumable and not alive:
        buttons[0].button("Retry" if record.status == "failed" else "Resume", key="session_resume", on_click=lambda: api.resume(store(), record.id),
                          help="start a worker: it replays the store and waits at the same gate")
    if not record.finished:
        buttons[1].button("Cancel", key="session_cancel", on_click=lambda: api.cancel(store(), record.id))
    buttons[2].page_link("pages/candidates.py", label="Candidates and plots", query_params={"id": record.id})


def live_changed(record_id: str, shown_gate: int | None, shown_status: str) -> bool:
    """Whether the worker has opened another gate or changed the session's status since the page was drawn."""
    handle = store()
    pending = handle.open_gate_ids(record_id)
    return (pending[0] if pending else None) != shown_gate or handle.session(record_id).status != shown_status


def live(record_id: str, shown_gate: int | None, shown_status: str) -> None:
    """The fragment's body (re-run every 0.3 s while the session runs): the timeline, and a rerun of the whole
    page once the worker has written a new gate or status."""
    if live_changed(record_id, shown_gate, shown_status):
        st.rerun(scope="app")
    with st.expander("Timeline", expanded=True):
        render_timeline(store().events_tail(record_id, 200))


def render() -> None:
    record = session_from_url()
    if record is None:
        return
    handle = store()
    view = api.session_view(handle, record.id)
    gate = view.pending[0] if view.pending else None
    # The live fragment is registered before the page's heavy part (it draws below it, after `body`): a timer tick
    # that lands while a full rerun draws the page then finds it registered.
    body = st.container()
    st.fragment(live, run_every=None if record.finished else LIVE_EVERY_S)(record.id, gate.id if gate else None, record.status)
    with body:
        render_header(record, view.worker_alive)
        render_stage_progress(stage_states(record.stage or "algorithm", handle.decided_stage_ends(record.id), record.status,
                                           handle.stage_outcomes(record.id)))
        if gate is not None:
            render_gate(record, gate)
        elif not record.finished:
            st.info("The worker is busy (judging, profiling or asking the agents); the next gate shows here as soon as it is written.")
        else:
            render_story(record)


init_page_state()
apply_style()
render()
