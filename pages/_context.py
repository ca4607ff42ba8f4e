"""What every page shares: the store handle (one per server process), the session the URL names, and what a gate's
renderer may look up in the store."""

from __future__ import annotations

import os

import streamlit as st

from components.gate import Context
from pipeline import api
from pipeline.store import Store
from pipeline.store.records import SessionRecord


@st.cache_resource
def _open(path: str) -> Store:
    return api.open_store(path)


def store_handle() -> Store:
    """The store of EGG_DB (else data/egg.sqlite): one handle per server; each thread gets its own connection."""
    return _open(str(api.default_db_path(dict(os.environ))))


def store() -> Store:
    """The handle, looked up on every call: EGG_DB names the database (a test may point it elsewhere)."""
    return store_handle()


def session_from_url(placeholder: str = "Choose a session") -> SessionRecord | None:
    """The session `?id=` names, else one picked here (and put in the URL, so a reload shows the same one)."""
    handle = store()
    wanted = st.query_params.get("id")
    if wanted:
        record = handle.session(wanted)
        if record is not None:
            return record
        st.error(f"no session {wanted!r} in {handle.path}")
    sessions = api.list_sessions(handle, limit=200)
    if not sessions:
        st.info("No session yet: start one on the New session page.")
        return None
    labels = {s.id: f"{s.id} · {s.problem_name} · {s.status}" + (f" · {s.label}" if s.label else "") for s in sessions}
    chosen = st.selectbox(placeholder, list(labels), format_func=labels.get, index=None, key="session_picker")
    if chosen is None:
        return None
    st.query_params["id"] = chosen
    return handle.session(chosen)


def gate_context(record: SessionRecord) -> Context:
    """What the gate renderers look up beyond a gate, in this session: gate numbers, prompts, candidates."""
    return Context(number_of=api.gate_numbers(store(), record.id).get, prompts_of=lambda heard: api.heard_prompts(store(), record.id, heard),
                   candidate_of=lambda candidate_id: api.find_candidate(store(), record.id, candidate_id),
                   stage_account=lambda stage: api.stage_account(store(), record.id, stage))
