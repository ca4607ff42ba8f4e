"""The decision controls of a gate, the proposal of a kernel gate, and the decisions that travel at a stage end.

The five buttons have the keys gate_approve, gate_edit, gate_reject, gate_skip and gate_stop, and the feedback box
gate_feedback (Streamlit puts `st-key-<key>` on each container). A decision is written by the page's callback, in
the button's own callback, so nothing a person decides lives only in the browser session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

ACTIONS = ("approve", "edit", "reject", "skip", "stop")
# What each decision means at each kind of gate (the buttons' help, so their labels stay short).
MEANING = {
    "plan": {"approve": "use this plan for the rewrite", "edit": "use the plan as edited in the editor",
             "reject": "ask the Profile role again, with your feedback", "skip": "skip this round", "stop": "end this stage now"},
    "kernel": {"approve": "judge this kernel", "edit": "judge the kernel as edited in the editor (a new candidate)",
               "reject": "ask the Code role again, with your feedback", "skip": "skip this kernel", "stop": "end this stage now"},
    "verdict": {"approve": "accept: a passing kernel competes for the stage's best; a failing one goes to repair",
                "edit": "verdicts are not edited", "reject": "do not keep it (your feedback goes to the stage's next proposals)",
                "skip": "do not keep it, no feedback", "stop": "end this stage now"},
    "stage_end": {"approve": "hand these decisions and this kernel to the next stage", "edit": "hand on the decisions as edited",
                  "reject": "a stage end is approved, edited or stopped", "skip": "hand them on as they are", "stop": "end the session here"},
}


@dataclass(frozen=True)
class Allowed:
    """Which decisions a gate takes now (the API refuses the others anyway; this keeps their buttons disabled)."""

    approve: bool
    edit: bool
    reject: bool
    skip: bool = True
    stop: bool = True

    @classmethod
    def for_gate(cls, kind: str, has_proposal: bool, *, feedback_heard: bool = True) -> Allowed:
        """`feedback_heard`: whether anyone reads a rejection's feedback (not with the `none` backend, where a person
        writes every kernel: there a reject would only be a skip)."""
        return cls(approve=has_proposal or kind in ("verdict", "stage_end"), edit=kind != "verdict",
                   reject=kind != "stage_end" and feedback_heard)


def decision_controls(kind: str, allowed: Allowed, on_decide: Callable[[str], None], *, feedback_label: str = "") -> None:
    """The feedback box (only where a reject is possible: feedback goes with it) and the five buttons."""
    if allowed.reject:
        st.text_area(feedback_label or "Feedback (goes to the agent's next call when you reject)", key="gate_feedback", height=80)
    columns = st.columns(len(ACTIONS))
    for column, action in zip(columns, ACTIONS):
        column.button(action.capitalize(), key=f"gate_{action}", type="primary" if action == "approve" else "secondary",
                      disabled=not getattr(allowed, action), help=MEANING[kind][action], on_click=on_decide, args=(action,),
                      width="stretch")


def render_kernel_proposal(payload: dict) -> None:
    """Who proposed it and why, and the numbers it exposes to the tuning engine."""
    label = payload.get("label") or payload.get("step", "kernel")
    st.markdown(f"**{label}**, proposed by {payload.get('author', '?')}")
    if payload.get("proposal") is None:
        st.warning(f"Nothing was proposed: {payload.get('note') or 'no proposal'}. Write the kernel in the editor and press Edit, or Skip.")
        return
    if payload.get("paradigm"):
        st.markdown(f"*paradigm:* {payload['paradigm']}")
    st.markdown(f"*rationale:* {payload.get('rationale') or '(none given)'}")
    tunables = payload.get("tunables") or []
    if tunables:
        st.markdown("*tunables (searched by the tuning engine on a GPU):* " + "; ".join(f"`{t['name']}` ∈ {t['values']}" for t in tunables))


def render_stage_end(payload: dict) -> None:
    proposal = payload.get("proposal") or {}
    last = payload.get("last_stage", False)
    st.markdown("**What the session ends with** (these decisions, and this kernel is best.py)" if last else
                "**What travels to the next stage** (only these decisions and this kernel: exploratory output is dropped)")
    for decision in proposal.get("decisions", []):
        st.markdown(f"- **{decision['stage']}**: {decision['summary']}")
    best = proposal.get("best_id")
    best_ms = payload.get("best_ms")
    if best is None:
        st.markdown("No correct kernel: best.py will be the reference." if last else "No correct kernel yet: the next stages have nothing to tune.")
    else:
        st.markdown(("best.py will be candidate" if last else "The next stage starts from candidate") + f" **{best}**"
                    + (f" ({best_ms:.4g} ms)" if best_ms else ""))
    choices = payload.get("choices") or []
    if choices:
        st.caption("passing candidates you may choose instead (edit best_id): " + ", ".join(
            f"{c['id']} ({c['stage']}/{c['origin']}" + (f", {c['median_ms']:.4g} ms)" if c.get("median_ms") else ")") for c in choices))
