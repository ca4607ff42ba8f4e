"""The Profile role's plan (a Diagnosis) as a person reads it, and as JSON they can edit, validated in place."""

from __future__ import annotations

import json

import streamlit as st
from pydantic import ValidationError

from pipeline.agents.replies import Diagnosis


def validate_plan(text: str) -> tuple[Diagnosis | None, str]:
    """The edited plan, or the reason it is refused (the same type the Profile Agent's reply is parsed into)."""
    try:
        return Diagnosis.model_validate_json(text), ""
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the document"
        more = f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
        return None, f"not a valid Diagnosis: {where}: {first['msg']}{more}"


def plan_text(diagnosis: dict | None) -> str:
    return json.dumps(diagnosis, indent=2) if diagnosis is not None else json.dumps(
        {"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "", "value": "", "interpretation": ""}],
                          "fixes": [{"change": "", "expected_gain_pct": 0}]}]}, indent=2)


def render_plan(diagnosis: Diagnosis) -> None:
    for rank, bottleneck in enumerate(diagnosis.bottlenecks, start=1):
        st.markdown(f"**{rank}. {bottleneck.name}**")
        st.dataframe([{"metric": e.metric, "value": e.value, "interpretation": e.interpretation} for e in bottleneck.evidence],
                     hide_index=True, width="stretch")
        st.markdown("\n".join(f"- {fix.change} (expected {fix.expected_gain_pct:g}% faster)" for fix in bottleneck.fixes))


def plan_editor(key: str, initial: dict | None, error: str = "") -> str:
    """The plan as JSON in a text area (keyed by the gate, so a new gate starts from its own proposal)."""
    text = st.text_area("The plan as JSON (edit, then press Edit to use your version)", value=plan_text(initial), key=key, height=320)
    if error:
        st.error(error)
    return text
