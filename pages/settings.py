"""Settings: the backend a new session gets, the device, the database, and which keys are present (never their
values)."""

from __future__ import annotations

import os

import streamlit as st

from pages._context import store
from pipeline import api
from pipeline.sessions.backends import BackendError, default_backend


def render() -> None:
    st.title("Settings")
    st.subheader("Backend")
    try:
        backend = default_backend()
        st.write(f"A new session gets **{backend.describe()}** by default.")
    except BackendError as error:
        st.error(f"the model configuration is broken: {error}")
    st.caption("Set a model with `EGG_LLM=PROVIDER:MODEL[@BASE_URL]` or `llm.spec` in egg.yaml, before starting the app.")
    st.subheader("Keys")
    st.caption("egg reads keys from the environment (or egg.yaml) and never shows, stores or logs them.")
    st.dataframe([{"variable": name, "present": "yes" if present else "no"} for name, present in api.keys_present().items()],
                 hide_index=True, width="content")
    st.subheader("Device")
    st.write("An NVIDIA GPU is visible: kernels are timed." if api.gpu_visible()
             else "No GPU visible: sessions check correctness on the CPU through Triton's interpreter, with no timing.")
    st.subheader("Database")
    handle = store()
    sessions = api.list_sessions(handle)
    st.write(f"`{handle.path}` (EGG_DB {'set' if os.environ.get(api.DB_VARIABLE) else 'not set: the default'}), {len(sessions)} sessions")
    st.caption("Sessions' files (candidates, best.py, report.md, evidence.json) live in sessions/ beside it.")


render()
