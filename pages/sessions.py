"""Sessions: every stored session with its outcome; open, resume, branch, cancel, compare two side by side, and
export best.py, report.md and evidence.json as downloads."""

from __future__ import annotations

import streamlit as st

from components.diff import render_diff
from pages._context import store
from pipeline import api
from pipeline.store.records import SessionRecord


def init_page_state() -> None:
    st.session_state.setdefault("sessions_message", "")


def rows(sessions: list[SessionRecord]) -> list[dict]:
    return [{"id": s.id, "problem": s.problem_name, "status": "cancelling" if s.cancel_requested and not s.finished else s.status, "stage": s.stage, "review": s.review,
             "backend": s.backend.get("describe", s.backend.get("kind")), "device": s.device,
             "outcome": s.outcome.get("headline", ""), "branch of": s.parent_id or "", "label": s.label, "created": s.created_at[:19]}
            for s in sessions]


def act(action, *args) -> None:
    try:
        result = action(store(), *args)
    except api.ApiError as error:
        st.session_state["sessions_message"] = f"error: {error}"
        return
    st.session_state["sessions_message"] = f"{action.__name__}: done" + (f" ({result.id})" if hasattr(result, "id") else "")


def branch(session_id: str) -> None:
    """The gate is read when the button is pressed (a callback's arguments are those of the last rerun); the branch
    gets its worker at once, so it is waiting at that gate when the person opens it."""
    try:
        record = api.branch(store(), session_id, st.session_state["branch_gate"])
        api.start_worker(store(), record.id)
    except api.ApiError as error:
        st.session_state["sessions_message"] = f"error: {error}"
        return
    st.session_state["sessions_message"] = ""
    st.session_state["sessions_branched"] = record.id


def render_actions(record: SessionRecord) -> None:
    alive = api.worker_alive(record)
    columns = st.columns(4)
    columns[0].page_link("pages/session.py", label="Open", query_params={"id": record.id})
    columns[1].button("Resume", key="sessions_resume", disabled=not record.resumable or alive, on_click=act, args=(api.resume, record.id),
                      help="start a worker for a session that has none (a failed one is retried)")
    with columns[2].popover("Cancel", disabled=record.finished):
        st.markdown(f"Cancel session **{record.id}** ({record.problem_name})? Its worker stops at the next step; what it judged stays in the store.")
        st.button("Yes, cancel it", key="sessions_cancel", type="primary", on_click=act, args=(api.cancel, record.id))
    gates = store().gates(record.id, with_payload=False)
    with columns[3].popover("Branch from a gate", disabled=not gates):
        st.selectbox("gate", [g.id for g in gates], key="branch_gate",
                               format_func=lambda i: next(f"{g.id} · {g.stage} · {g.kind}" + (f" · {g.decision.action}" if g.decision else "") for g in gates if g.id == i))
        st.button("Branch", key="sessions_branch", on_click=branch, args=(record.id,))
    try:
        files = api.export_files(store(), record.id)
    except api.ApiError as error:
        st.caption(str(error))
        return
    downloads = st.columns(len(files))
    for column, (name, data) in zip(downloads, files.items()):
        column.download_button(f"Download {name}", data, file_name=name, key=f"download_{name}")


def render_compare(sessions: list[SessionRecord]) -> None:
    """Two sessions side by side: each best kernel with its speed, where they parted ways, and the two best kernels'
    diff."""
    st.subheader("Compare two")
    ids = [s.id for s in sessions]
    labels = {s.id: f"{s.id} · {s.problem_name} · {s.status}" + (f" · {s.label}" if s.label else "") for s in sessions}
    chosen = st.multiselect("two sessions", ids, max_selections=2, key="compare_pick", format_func=labels.get)
    if len(chosen) != 2:
        return
    handle = store()
    bests = [api.best_kernel(handle, session_id) for session_id in chosen]
    columns = st.columns(2)
    for column, session_id, best in zip(columns, chosen, bests):
        record = handle.session(session_id)
        with column:
            st.markdown(f"**{record.problem_name}** · {record.id} · {record.status}" + (f" · branch of {record.parent_id}" if record.parent_id else ""))
            st.write(record.outcome.get("headline", "no outcome yet"))
            if record.outcome.get("versus_compile"):
                st.warning(record.outcome["versus_compile"])
            candidates = api.candidate_rows(handle, session_id)
            metrics = st.columns(3)
            metrics[0].metric("judged", sum(c.status is not None for c in candidates))
            metrics[1].metric("passed", sum(c.status == "ok" for c in candidates))
            metrics[2].metric("best.py", f"{best.median_ms:.4g} ms" if best.median_ms else "reference" if best.candidate_id is None else "not timed",
                              help=best.label + ("; " + ", ".join(f"{v:.3f}x vs {k}" for k, v in best.speedups.items()) if best.speedups else ""))
            decisions = handle.decisions(session_id)
            st.caption(f"{len(decisions)} decisions: " + ", ".join(sorted({d.action for d in decisions})))
    parted = api.divergence(handle, *chosen)
    if parted is None:
        st.info("The two sessions met the same gates and took the same decisions throughout.")
    else:
        st.markdown(f"**They part ways at gate {parted.number}:** {chosen[0]}: {api.Divergence.said(parted.first)}; "
                    f"{chosen[1]}: {api.Divergence.said(parted.second)}.")
    if bests[0].source and bests[1].source:
        st.markdown("**The two best.py kernels**")
        render_diff(bests[0].source, bests[1].source, before_name=bests[0].label)


def render() -> None:
    st.title("Sessions")
    sessions = api.list_sessions(store())
    if not sessions:
        st.info("No session yet: start one on the New session page, or import the recorded ones on the Learn page.")
        return
    st.dataframe(rows(sessions), hide_index=True, width="stretch")
    labels = {s.id: f"{s.id} · {s.problem_name} · {s.status}" for s in sessions}
    chosen = st.selectbox("Session", list(labels), format_func=labels.get, key="sessions_pick")
    render_actions(store().session(chosen))
    if st.session_state["sessions_message"]:
        st.info(st.session_state["sessions_message"])
    branched = st.session_state.get("sessions_branched")
    if branched:
        st.success(f"branch {branched} created; its worker is running it to the gate you branched from")
        st.page_link("pages/session.py", label=f"Open the branch {branched}", query_params={"id": branched}, icon=":material/call_split:")
    render_compare(sessions)


init_page_state()
render()
