"""A gate on screen: one renderer per gate kind (plan, kernel, verdict, stage end) that both the Session page (a
gate to decide, with its editor) and the Learn page (a replay, read-only) draw, where the person's earlier words
went, and the decision controls.

What each kind holds, which decisions it takes and what they mean come from the registry
(`pipeline.sessions.gatekinds`); this module only draws them. The five buttons have the keys gate_approve,
gate_edit, gate_reject, gate_skip and gate_stop, and the feedback box gate_feedback (Streamlit puts `st-key-<key>`
on each container). A decision is written by the page's callback, in the button's own callback, so nothing a person
decides lives only in the browser session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from textwrap import shorten
from typing import Any

import streamlit as st

from components.diff import render_beside, render_diff
from components.plan import plan_editor, render_plan
from components.profile import render_profile
from components.verdict import render_verdict
from pipeline.profiler.report import ProfileReport
from pipeline.sessions.gatekinds import KINDS, Gate, Heard, KernelPayload, PlanPayload, StageEndPayload, VerdictPayload
from pipeline.types import from_jsonable

ACTIONS = ("approve", "edit", "reject", "skip", "stop")
# Keyboard shortcuts for the five decisions (Streamlit reserves C and R, so Reject is Alt+J).
SHORTCUTS = {"approve": "Alt+A", "edit": "Alt+E", "reject": "Alt+J", "skip": "Alt+S", "stop": "Alt+X"}


@dataclass(frozen=True)
class Allowed:
    """Which decisions a gate takes now (the API refuses the others anyway; this keeps their buttons disabled)."""

    approve: bool
    edit: bool
    reject: bool
    skip: bool = True
    stop: bool = True

    @classmethod
    def of(cls, gate: Gate, *, feedback_heard: bool = True) -> Allowed:
        allowed = gate.spec.allowed(gate.data, feedback_heard=feedback_heard)
        return cls(**{action: action in allowed for action in ACTIONS})

    @classmethod
    def for_gate(cls, kind: str, has_proposal: bool, *, feedback_heard: bool = True) -> Allowed:
        """For a kind alone (`has_proposal`: whether something was proposed). `feedback_heard`: whether anyone reads
        a rejection's feedback (not with the `none` backend, where a person writes every kernel)."""
        spec = KINDS[kind]
        allowed = set(spec.meaning) - (set() if has_proposal else set(spec.needs_proposal)) - (set() if feedback_heard else {"reject"})
        return cls(**{action: action in allowed for action in ACTIONS})


def decision_controls(kind: str, allowed: Allowed, on_decide: Callable[[str], None], *, feedback_label: str = "") -> None:
    """The feedback box (only where a reject is possible: feedback goes with it) and the five buttons."""
    spec = KINDS[kind]
    if allowed.reject:
        st.text_area(feedback_label or f"Feedback for {spec.feedback_to} (goes into its next call when you reject)", key="gate_feedback", height=80)
    columns = st.columns(len(ACTIONS))
    for column, action in zip(columns, ACTIONS):
        enabled = getattr(allowed, action)
        column.button(action.capitalize(), key=f"gate_{action}", type="primary" if action == "approve" else "secondary",
                      disabled=not enabled, help=spec.meaning.get(action, f"a {spec.title.lower()} does not take this") + f" ({SHORTCUTS[action]})",
                      on_click=on_decide, args=(action,), width="stretch", shortcut=SHORTCUTS[action] if enabled else None)


# where a person's words went ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    """What a renderer may look up beyond the gate: the number of a gate by its key, and the prompts a `Heard`
    names (the page reads them through pipeline.api)."""

    number_of: Callable[[str], int | None] = lambda key: None
    prompts_of: Callable[[Heard], list[dict[str, Any]]] = lambda heard: []
    candidate_of: Callable[[int], Any] = lambda candidate_id: None  # pipeline.api.CandidateDetail, or None
    stage_account: Callable[[str], Any] = lambda stage: None  # pipeline.api.StageAccount, or None


def render_heard(gate: Gate, context: Context) -> None:
    """For each earlier decision this proposal answers: what the person said and the prompt it went into."""
    for heard in gate.data.heard:
        number = context.number_of(heard.gate_key)
        where = f"gate {number}" if number else "an earlier gate"
        quoted = heard.text if len(heard.text) <= 300 else heard.text[:300] + " ..."
        if not heard.calls:
            st.info(f"This answers your {heard.what} at {where}: \u201c{quoted}\u201d. No model prompt carried it: the expert's rules read it "
                    "(the rationale below says what they made of it).", icon=":material/forum:")
            continue
        agents = ", ".join(sorted({a or "model" for a in heard.agents}))
        st.info(f"This answers your {heard.what} at {where}: \u201c{quoted}\u201d. It went verbatim into the prompt of "
                f"{len(heard.calls)} model call(s) ({agents}).", icon=":material/forum:")
        for agent, key, request in zip(heard.agents, heard.calls, context.prompts_of(heard)):
            with st.expander(f"the prompt it went into: {agent or 'model'} call {key[:12]}"):
                for message in request.get("messages", []):
                    content = message.get("content") or ""
                    if heard.text in content:
                        st.caption(f"{message.get('role')} message, {len(content)} characters; your words at character {content.index(heard.text)}")
                        st.code(content, language=None, wrap_lines=True)


# one renderer per kind ---------------------------------------------------------------------------------------------

def render_plan_gate(gate: Gate, *, editor_key: str | None = None, expert_key: str = "profile_expert", hide_answer: bool = False) -> None:
    """The bottleneck report and the plan. `hide_answer` (Learn, before the learner predicts): the report's
    numbers only, no class and no plan."""
    p = gate.data
    assert isinstance(p, PlanPayload)
    report = from_jsonable(ProfileReport, p.report) if p.report else None

    def the_report() -> None:
        if report is not None:
            render_profile(report, expert=st.toggle("expert view (every metric)", key=expert_key), hide_verdict=hide_answer)
        else:
            st.info("No profile report: " + (p.measurements.get("profile_error") or "the judge's numbers only"))

    if hide_answer:
        the_report()
        return
    if editor_key is None:  # a replay: one column, the plan after the report
        the_report()
        if p.proposal is not None:
            render_plan(p.diagnosis())
        else:
            st.info(f"no plan was proposed here: {p.note}")
        return
    left, right = st.columns([1, 1])
    with left:
        st.subheader("The bottleneck report")
        the_report()
        with st.expander("what the Profile role was shown (JSON)"):
            st.json(p.measurements, expanded=False)
    with right:
        st.subheader(f"The plan, by {p.author}")
        if p.proposal is not None:
            render_plan(p.diagnosis())
        else:
            st.warning(f"No plan was proposed: {p.note or 'no proposal'}. Write one below and press Edit, or Skip.")
        plan_editor(editor_key, p.proposal)


def render_kernel_proposal(p: KernelPayload) -> None:
    """Who proposed it and why, and the numbers it exposes to the tuning engine."""
    st.markdown(f"**{p.title}**, proposed by {p.author}")
    if p.proposal is None:
        st.warning(f"Nothing was proposed: {p.note or 'no proposal'}. Write the kernel in the editor and press Edit, or Skip.")
        return
    if p.paradigm:
        st.markdown(f"*paradigm:* {p.paradigm}")
    st.markdown(f"*rationale:* {p.rationale or '(none given)'}")
    if p.tunables:
        st.markdown("*tunables (searched by the tuning engine on a GPU):* " + "; ".join(f"`{t.name}` ∈ {t.values}" for t in p.tunables))


def verdict_brief(verdict: dict[str, Any] | None) -> str:
    """A verdict in one line: status, time, speedups (or why it failed)."""
    if not verdict:
        return "not judged"
    line = f"**{verdict.get('status')}**"
    if verdict.get("median_ms"):
        line += f", {verdict['median_ms']:.4g} ms"
    speedups = verdict.get("speedups") or {}
    if speedups:
        line += ", " + ", ".join(f"{s:.3f}x vs {'torch.compile' if k == 'compile' else k}" for k, s in speedups.items())
    if verdict.get("status") != "ok" and verdict.get("reason"):
        line += f": {shorten(verdict['reason'], 300, placeholder=' ...')}"
    return line


def against_parent(median_ms: float | None, parent_ms: float | None, parent_id: int, parent_status: str | None) -> str:
    """What a candidate did against the kernel it came from: faster or slower by how much, in one line."""
    if median_ms is None or parent_ms is None:
        return f"*against its parent, candidate {parent_id} ({parent_status or 'not judged'}):* no times to compare on this device"
    ratio = parent_ms / median_ms
    said = f"{ratio:.2f}x faster" if ratio >= 1.005 else f"{1 / ratio:.2f}x slower" if ratio <= 0.995 else "the same speed (within 0.5%)"
    return f"*against its parent, candidate {parent_id} ({parent_ms:.4g} ms):* **{said}**, {median_ms:.4g} ms"


def render_plan_brief(plan: dict[str, Any] | None) -> None:
    """The plan a rewrite implements, in a few lines: each bottleneck and its fixes."""
    if not plan:
        return
    lines = []
    for bottleneck in plan.get("bottlenecks", [])[:3]:
        fixes = "; ".join(f.get("change", "") for f in bottleneck.get("fixes", [])[:3])
        lines.append(f"- **{bottleneck.get('name')}**: {fixes}")
    st.markdown("*the plan it implements:*\n" + "\n".join(lines))


def render_kernel_gate(gate: Gate, *, editor_key: str | None = None) -> None:
    """The proposal with the plan it answers and its parent's verdict, its diff (against the proposal the person
    rejected here, or the parent; a seed beside the reference problem), and the editor."""
    p = gate.data
    assert isinstance(p, KernelPayload)
    render_kernel_proposal(p)
    render_plan_brief(p.plan)
    if p.parent_id is not None:
        st.markdown(f"*its parent, candidate {p.parent_id}:* {verdict_brief(p.parent_verdict)}")
    parent = p.parent_source or ""
    if p.proposal is not None:
        parent_name = "parent kernel" if p.parent_id else "reference problem"
        against = parent_name
        if p.rejected_source:  # what changed in answer to the rejection, first
            against = st.radio("diff against", ("the proposal you rejected", parent_name), horizontal=True, key=f"diff_against_{gate.id}")
        if against == "the proposal you rejected":
            render_diff(p.rejected_source, p.proposal, before_name="proposal you rejected")
        elif p.parent_id is None:  # a seed: the problem it replaces beside it (a diff would be the deleted Model)
            render_beside(parent, p.proposal)
        else:
            render_diff(parent, p.proposal, before_name=parent_name)
    if editor_key is not None:
        st.text_area("The whole file (edit it and press Edit to judge your version as a new candidate)",
                     value=p.proposal or parent, key=editor_key, height=420)


def render_verdict_gate(gate: Gate, context: Context = Context(), *, editor_key: str | None = None) -> None:
    """The verdict, and the kernel it judges against its parent."""
    p = gate.data
    assert isinstance(p, VerdictPayload)
    st.markdown(f"**Candidate {p.candidate_id}**" + (" would be the stage's best." if p.would_keep else
                f" (the best so far is candidate {p.best_id})" if p.best_id else ""))
    detail = context.candidate_of(p.candidate_id)
    parent = context.candidate_of(detail.row.parent_id) if detail is not None and detail.row.parent_id else None
    if parent is not None:
        st.markdown(against_parent(detail.row.median_ms, parent.row.median_ms, detail.row.parent_id, parent.row.status))
    render_verdict(p.result())
    if detail is not None:
        parent_id = detail.row.parent_id
        with st.expander(f"the kernel judged, against {'candidate ' + str(parent_id) if parent_id else 'the reference problem'}", expanded=True):
            if parent_id:
                render_diff(detail.parent_source or "", detail.source, before_name=f"candidate {parent_id}")
            else:
                render_beside(detail.parent_source or "", detail.source, proposal_name=f"candidate {p.candidate_id}")


def account_lines(account: Any) -> list[str]:
    """A stage's account as Markdown lines: the headline, then each candidate against its parent, fastest first,
    then the failures, each with what it tried and what the judge found."""
    def time_text(ms: float | None) -> str:
        return "untimed" if ms is None else f"{ms:.4g} ms"

    lines = [f"**{account.headline()}**"]
    ranked = sorted(account.steps, key=lambda step: (step.ratio is None, -(step.ratio or 0.0), step.candidate_id))
    for step in ranked:
        tried = f" ({shorten(step.tried, 140, placeholder=' ...')})" if step.tried else ""
        if step.outcome in ("faster", "slower"):
            times = step.ratio if step.outcome == "faster" else 1.0 / step.ratio
            verdict = f"**{times:.2f}x {step.outcome}** than {step.against} ({time_text(step.median_ms)} against {time_text(step.parent_ms)})"
        elif step.outcome == "as fast":
            verdict = f"as fast as {step.against} ({time_text(step.median_ms)} against {time_text(step.parent_ms)})"
        elif step.outcome == "failed":
            verdict = f"failed, {step.status}: {shorten(step.reason, 200, placeholder=' ...')}"
        else:
            verdict = step.outcome
        lines.append(f"- candidate {step.candidate_id}, {step.origin}{tried}: {verdict}")
    return lines


def render_stage_end_gate(gate: Gate, *, editor_key: str | None = None, context: Context = Context()) -> None:
    p = gate.data
    assert isinstance(p, StageEndPayload)
    account = context.stage_account(gate.stage)
    if account is not None and account.steps:
        st.markdown("\n".join(account_lines(account)))
    st.markdown("**What the session ends with** (these decisions, and this kernel is best.py)" if p.last_stage else
                "**What travels to the next stage** (only these decisions and this kernel: exploratory output is dropped)")
    for decision in p.proposal.decisions:
        st.markdown(f"- **{decision.stage}**: {decision.summary}")
    best = p.proposal.best_id
    if best is None:
        st.markdown("No correct kernel: best.py will be the reference." if p.last_stage else "No correct kernel yet: the next stages have nothing to tune.")
    else:
        st.markdown(("best.py will be candidate" if p.last_stage else "The next stage starts from candidate") + f" **{best}**"
                    + (f" ({p.best_ms:.4g} ms)" if p.best_ms else ""))
    if p.choices:
        st.caption("passing candidates you may choose instead (edit best_id): " + ", ".join(
            f"{c.id} ({c.stage}/{c.origin}" + (f", {c.median_ms:.4g} ms)" if c.median_ms else ")") for c in p.choices))
    if editor_key is not None:
        st.text_area("What travels, as JSON (edit the summaries or best_id, then press Edit)",
                     value=json.dumps(p.proposal.model_dump(mode="json"), indent=2), key=editor_key, height=200)


RENDERERS: dict[str, Callable[..., None]] = {"plan": render_plan_gate, "kernel": render_kernel_gate, "verdict": render_verdict_gate,
                                             "stage_end": render_stage_end_gate}
assert set(RENDERERS) == set(KINDS), "every gate kind needs its renderer"


def render_gate_body(gate: Gate, context: Context = Context(), *, editor_key: str | None = None, **options: Any) -> None:
    """What the gate shows, by its kind's renderer, after where the person's earlier words went."""
    render_heard(gate, context)
    if gate.kind in ("verdict", "stage_end"):
        options["context"] = context
    RENDERERS[gate.kind](gate, editor_key=editor_key, **options)
