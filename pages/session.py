"""Session: the four stages as a progress line, the live timeline, and the pending gate with what it shows (the
bottleneck report and plan, the kernel's diff, the verdict, or what travels at a stage's end) and the decisions."""

from __future__ import annotations

import json

import streamlit as st

from components.diff import render_diff
from components.gate import Allowed, decision_controls, render_kernel_proposal, render_stage_end
from components.plan import plan_editor, render_plan, validate_plan
from components.profile import render_profile
from components.session import render_stage_progress, render_timeline, stage_states
from components.verdict import render_verdict
from components.style import apply as apply_style
from pages._context import session_from_url, store
from pipeline import api
from pipeline.agents.replies import Diagnosis
from pipeline.profiler.report import ProfileReport
from pipeline.store.records import GateRecord, SessionRecord
from pipeline.types import EvalResult, from_jsonable

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


def render_plan_gate(gate: GateRecord) -> str:
    payload = gate.payload
    left, right = st.columns([1, 1])
    with left:
        st.subheader("The bottleneck report")
        report = payload.get("report")
        if report:
            st.toggle("expert view (every metric)", key="profile_expert")
            render_profile(from_jsonable(ProfileReport, report), expert=st.session_state["profile_expert"])
        else:
            st.info("No profile report: " + (payload.get("measurements", {}).get("profile_error") or "the judge's numbers only"))
        with st.expander("what the Profile role was shown (JSON)"):
            st.json(payload.get("measurements", {}), expanded=False)
    with right:
        st.subheader(f"The plan, by {payload.get('author', '?')}")
        if payload.get("proposal") is not None:
            render_plan(Diagnosis.model_validate(payload["proposal"]))
        else:
            st.warning(f"No plan was proposed: {payload.get('note') or 'no proposal'}. Write one below and press Edit, or Skip.")
        plan_editor(editor_key(gate), payload.get("proposal"))
    return "feedback for the Profile role when you reject"


def render_kernel_gate(gate: GateRecord) -> str:
    payload = gate.payload
    render_kernel_proposal(payload)
    parent = payload.get("parent_source") or ""
    if payload.get("proposal") is not None:
        parent_name = "parent kernel" if payload.get("parent_id") else "reference problem"
        against = parent_name
        if payload.get("rejected_source"):  # what changed in answer to the rejection, first
            against = st.radio("diff against", ("the proposal you rejected", parent_name), horizontal=True, key=f"diff_against_{gate.id}")
        if against == "the proposal you rejected":
            render_diff(payload["rejected_source"], payload["proposal"], before_name="proposal you rejected")
        else:
            render_diff(parent, payload["proposal"], before_name=parent_name)
    st.text_area("The whole file (edit it and press Edit to judge your version as a new candidate)",
                 value=payload.get("proposal") or parent, key=editor_key(gate), height=420)
    return "feedback for the Code role when you reject"


def render_verdict_gate(gate: GateRecord) -> str:
    payload = gate.payload
    result = from_jsonable(EvalResult, payload["verdict"])
    st.markdown(f"**Candidate {payload['candidate_id']}**" + (" would be the stage's best." if payload.get("would_keep") else
                f" (the best so far is candidate {payload.get('best_id')})" if payload.get("best_id") else ""))
    render_verdict(result)
    return "feedback for the stage's next proposals when you reject"


def render_stage_end_gate(gate: GateRecord) -> str:
    render_stage_end(gate.payload)
    st.text_area("What travels, as JSON (edit the summaries or best_id, then press Edit)",
                 value=json.dumps(gate.payload.get("proposal"), indent=2), key=editor_key(gate), height=200)
    return "a stage end takes no rejection"


RENDERERS = {"plan": render_plan_gate, "kernel": render_kernel_gate, "verdict": render_verdict_gate, "stage_end": render_stage_end_gate}
TITLES = {"plan": "Plan gate", "kernel": "Kernel gate", "verdict": "Verdict gate", "stage_end": "Stage end"}


def render_gate(record: SessionRecord, gate: GateRecord) -> None:
    number = 1 + sum(1 for g in store().gates(record.id, with_payload=False) if g.id < gate.id)  # this session's own count
    st.header(f"{TITLES[gate.kind]} · {gate.stage} · gate {number}", help=f"gate id {gate.id} (egg gate decide {record.id} {gate.id} ...)")
    feedback_label = RENDERERS[gate.kind](gate)
    has_proposal = gate.payload.get("proposal") is not None
    heard = record.backend.get("kind") != "none"
    decision_controls(gate.kind, Allowed.for_gate(gate.kind, has_proposal, feedback_heard=heard), lambda action: decide(record.id, gate, action),
                      feedback_label=feedback_label)
    if st.session_state["decide_error"]:
        st.error(st.session_state["decide_error"])


def render_header(record: SessionRecord, alive: bool) -> None:
    st.title(f"{record.problem_name}" + (f" · {record.label}" if record.label else ""))
    worker = "worker running" if alive else ("no worker" if not record.finished else "")
    st.caption(f"session {record.id} · {record.status}" + (f" ({worker})" if worker else "") +
               f" · backend {record.backend.get('describe', record.backend.get('kind'))} · review {record.review} · device {record.device}")
    if record.error:
        st.error(record.error)
    if record.outcome.get("headline"):
        (st.success if not record.outcome.get("best_is_reference") else st.warning)(record.outcome["headline"])
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
    render_header(record, view.worker_alive)
    render_stage_progress(stage_states(record.stage or "algorithm", handle.decided_stage_ends(record.id), record.status,
                                       handle.stage_outcomes(record.id)))
    gate = view.pending[0] if view.pending else None
    if gate is not None:
        render_gate(record, gate)
    elif not record.finished:
        st.info("The worker is busy (judging, profiling or asking the agents); the next gate shows here as soon as it is written.")
    st.fragment(live, run_every=None if record.finished else LIVE_EVERY_S)(record.id, gate.id if gate else None, record.status)


init_page_state()
apply_style()
render()
