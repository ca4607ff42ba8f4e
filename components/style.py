"""The few style rules egg adds to Streamlit's: code is edited in a monospace font."""

from __future__ import annotations

import streamlit as st

CSS = """
<style>
[class*="st-key-gate_"][class*="_text"] textarea, .st-key-problem_paste textarea {
  font-family: "Source Code Pro", ui-monospace, monospace; font-size: 13px; line-height: 1.45;
}
</style>
"""


def apply() -> None:
    st.html(CSS)
