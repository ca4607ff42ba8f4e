"""The gate kinds, in one registry: what each gate shows (a pydantic payload), what an edit of it is and how the edit
is checked, which review modes stop at it, the decisions it takes and what each means, and its one-line summary.

The engine builds these payloads (`Optimizer`), the store keeps them as JSON, `pipeline.api` hands them back typed
(`Gate.data`), and each face draws them with one renderer per kind (`components/gates.py`). Adding a gate kind is a
payload class and a `GateKind` here, the `Optimizer` call that asks it, and its renderer.

Payloads read back tolerate fields they do not know (sessions recorded by an older egg stay readable) and default
the ones a recording lacks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.agents.replies import Diagnosis
from pipeline.store.records import ACTIONS, GATE_KINDS, GateRecord
from pipeline.types import EvalResult, from_jsonable

REVIEW_MODES = ("every", "plans", "stage_ends", "auto")


class DecisionError(ValueError):
    """A decision a gate cannot take; the message is one line for the person."""


# what travels at a stage end (the paper's selective context) -------------------------------------------------------

class TravellingDecision(BaseModel):
    """One decision that travels to the next stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    stage: str
    summary: str = Field(min_length=1)


class StageEnd(BaseModel):
    """What a stage hands on: its decisions and the kernel the next stage starts from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decisions: list[TravellingDecision]
    best_id: int | None = Field(description="the candidate the next stage starts from; one of the passing candidates")


# payloads ----------------------------------------------------------------------------------------------------------

class Heard(BaseModel):
    """Where a person's word went: the feedback of a rejection, or an edited plan, and the model calls whose
    prompts carried it verbatim (their request keys: the store keeps each request). No calls: the backend has no
    prompt (the expert's rules read it; the gate's note says what they made of it)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    gate_key: str  # the gate decided (keys are the same in a replay and a branch; row ids are not)
    what: str  # "feedback" or "edited plan"
    text: str
    calls: list[str] = []
    agents: list[str] = []


class GatePayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    KIND: ClassVar[str]
    heard: list[Heard] = []  # the decisions this proposal answers

    @property
    def has_proposal(self) -> bool:
        return True


class PlanPayload(GatePayload):
    """A plan gate: the Profile role's Diagnosis of the best kernel, and what it was shown."""

    KIND: ClassVar[str] = "plan"
    proposal: dict[str, Any] | None = None  # a Diagnosis, as JSON; None: nothing was proposed (see note)
    note: str = ""
    author: str = "?"
    kernel_id: int | None = None
    objective: str = ""
    measurements: dict[str, Any] = {}
    report: dict[str, Any] | None = None  # a ProfileReport, as JSON

    @property
    def has_proposal(self) -> bool:
        return self.proposal is not None

    def diagnosis(self) -> Diagnosis | None:
        return Diagnosis.model_validate(self.proposal) if self.proposal is not None else None

    @property
    def report_kind(self) -> str | None:
        return ((self.report or {}).get("overall") or {}).get("kind")


class Tunable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str
    values: list[Any] = []


class KernelPayload(GatePayload):
    """A kernel gate: a proposed kernel (whole file), who proposed it and why, and what it changes."""

    KIND: ClassVar[str] = "kernel"
    step: str = "kernel"  # seed, transform, rewrite, repair
    label: str = ""
    proposal: str | None = None
    note: str = ""
    author: str = "?"
    rationale: str | None = None
    paradigm: str | None = None
    tunables: list[Tunable] = []
    parent_id: int | None = None
    parent_source: str | None = None
    diff: str = ""
    rejected_source: str | None = None  # the proposal this one answers, when the reviewer rejected one here
    plan: dict[str, Any] | None = None  # the Diagnosis a rewrite implements, as JSON
    parent_verdict: dict[str, Any] | None = None  # the parent's verdict in brief: status, median_ms, speedups, reason

    @property
    def has_proposal(self) -> bool:
        return self.proposal is not None

    @property
    def title(self) -> str:
        return self.label or self.step


class VerdictPayload(GatePayload):
    """A verdict gate: the judge's verdict on a candidate, and whether it would be kept."""

    KIND: ClassVar[str] = "verdict"
    candidate_id: int
    verdict: dict[str, Any]  # an EvalResult, as JSON
    best_id: int | None = None
    best_ms: float | None = None
    would_keep: bool = False

    def result(self) -> EvalResult:
        return from_jsonable(EvalResult, self.verdict)


class Choice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    id: int
    stage: str
    origin: str = ""
    median_ms: float | None = None


class StageEndPayload(GatePayload):
    """A stage end: the decisions that travel on, the kernel the next stage starts from, and the passing
    candidates that may be chosen instead."""

    KIND: ClassVar[str] = "stage_end"
    last_stage: bool = False
    proposal: StageEnd
    best_ms: float | None = None
    choices: list[Choice] = []


# kinds -------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GateKind:
    name: str
    title: str
    payload: type[GatePayload]
    reviewed_in: frozenset[str]  # the review modes that stop here for a person
    meaning: dict[str, str]  # action -> what it means here; an action absent is one this kind never takes
    edit: Callable[[GatePayload, str], Any] | None  # edited text -> the value stored; raises DecisionError
    read_edit: Callable[[Any], Any]  # a stored edit -> the value the engine uses
    summary: Callable[[GatePayload], str]
    feedback_to: str = ""  # who reads a rejection's feedback, for the feedback box's label
    needs_proposal: tuple[str, ...] = ()  # actions that need something proposed

    def parse(self, payload: dict[str, Any]) -> GatePayload:
        return self.payload.model_validate(payload)

    def allowed(self, payload: GatePayload, *, feedback_heard: bool = True) -> frozenset[str]:
        """The decisions this gate takes now. `feedback_heard`: False where nobody reads a rejection (the `none`
        backend: a person writes every kernel, so a reject would only be a skip)."""
        allowed = set(self.meaning)
        if not payload.has_proposal:
            allowed -= set(self.needs_proposal)
        if not feedback_heard:
            allowed.discard("reject")
        return frozenset(allowed)

    def refusal(self, action: str, payload: GatePayload, *, feedback_heard: bool = True) -> str | None:
        """Why this gate does not take `action` now (one line for the person), or None."""
        if action not in ACTIONS:
            return f"unknown decision {action!r}: one of {', '.join(ACTIONS)}"
        if action not in self.meaning:
            return {"edit": "a verdict is not edited: approve (accept it), reject or skip it; edit the kernel at its kernel gate",
                    "reject": "a stage end is approved, edited (the decisions that travel) or stopped"}.get(action, f"a {self.title} does not take {action}")
        if action == "reject" and not feedback_heard:
            instead = "skip it" if self.name == "verdict" else f"edit the {self.name}, skip or stop"
            return f"nobody reads a rejection in this session (backend none: a person writes the kernels): {instead}"
        if action in self.needs_proposal and not payload.has_proposal:
            return f"nothing was proposed at this {self.name} gate: give one with edit, or skip"
        return None


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "the document"
    return f"{where}: {first['msg']}" + (f" ({len(error.errors()) - 1} more)" if len(error.errors()) > 1 else "")


def check_kernel_source(text: str) -> None:
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise DecisionError(f"the kernel does not parse: line {error.lineno}: {error.msg}") from None
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        raise DecisionError("the kernel defines no class ModelNew at its top level")


def _edit_plan(payload: GatePayload, text: str) -> Any:
    try:
        return Diagnosis.model_validate_json(text).model_dump(mode="json")
    except ValidationError as error:
        raise DecisionError(f"the plan is not a valid Diagnosis: {_first_error(error)}") from None


def _edit_kernel(payload: GatePayload, text: str) -> Any:
    check_kernel_source(text)
    return text


def _edit_stage_end(payload: GatePayload, text: str) -> Any:
    assert isinstance(payload, StageEndPayload)
    try:
        end = StageEnd.model_validate_json(text)
    except ValidationError as error:
        raise DecisionError(f"not a valid stage end: {_first_error(error)}") from None
    choices = {c.id for c in payload.choices}
    if end.best_id is not None and end.best_id not in choices:
        raise DecisionError(f"best_id {end.best_id} is not a passing candidate of this session ({sorted(choices) or 'none'})")
    return end.model_dump(mode="json")


def _plan_summary(p: GatePayload) -> str:
    assert isinstance(p, PlanPayload)
    overall = (p.report or {}).get("overall") or {}
    measured = f"; profiler ({(p.report or {}).get('source')}): {overall.get('kind')}" if overall else ""
    if p.proposal is None:
        return f"no plan ({p.note}){measured}"
    top = (p.proposal.get("bottlenecks") or [{}])[0]
    return f"plan: {top.get('name')}, first fix: {(top.get('fixes') or [{}])[0].get('change', '')}{measured}"


def _kernel_summary(p: GatePayload) -> str:
    assert isinstance(p, KernelPayload)
    return f"{p.title}: " + ((p.rationale or "(no rationale)") if p.proposal is not None else f"nothing proposed ({p.note})")


def _verdict_summary(p: GatePayload) -> str:
    assert isinstance(p, VerdictPayload)
    v = p.verdict
    timing = (v.get("timing") or {}).get("median_ms")
    speed = ", ".join(f"{s:.3f}x vs {k}" for k, s in (v.get("speedups") or {}).items())
    return f"candidate {p.candidate_id}: {v.get('status')}" + (f", {timing:.4g} ms" if timing else "") + (f", {speed}" if speed else "")


def _stage_end_summary(p: GatePayload) -> str:
    assert isinstance(p, StageEndPayload)
    return "; ".join(f"{d.stage}: {d.summary}" for d in p.proposal.decisions) or "nothing decided yet"


KINDS: dict[str, GateKind] = {kind.name: kind for kind in (
    GateKind("plan", "Plan gate", PlanPayload, frozenset({"every", "plans"}),
             {"approve": "use this plan for the rewrite", "edit": "use the plan as edited in the editor",
              "reject": "ask the Profile role again, with your feedback", "skip": "skip this round", "stop": "end this stage now"},
             _edit_plan, Diagnosis.model_validate, _plan_summary, feedback_to="the Profile role", needs_proposal=("approve",)),
    GateKind("kernel", "Kernel gate", KernelPayload, frozenset({"every", "plans"}),
             {"approve": "judge this kernel", "edit": "judge the kernel as edited in the editor (a new candidate)",
              "reject": "ask the Code role again, with your feedback", "skip": "skip this kernel", "stop": "end this stage now"},
             _edit_kernel, lambda after: after, _kernel_summary, feedback_to="the Code role", needs_proposal=("approve",)),
    GateKind("verdict", "Verdict gate", VerdictPayload, frozenset({"every"}),
             {"approve": "accept: a passing kernel competes for the stage's best; a failing one goes to repair",
              "reject": "do not keep it (your feedback goes to the stage's next proposals)",
              "skip": "do not keep it, no feedback", "stop": "end this stage now"},
             None, lambda after: after, _verdict_summary, feedback_to="the stage's next proposals"),
    GateKind("stage_end", "Stage end", StageEndPayload, frozenset({"every", "stage_ends"}),
             {"approve": "hand these decisions and this kernel to the next stage", "edit": "hand on the decisions as edited",
              "skip": "hand them on as they are", "stop": "end the session here"},
             _edit_stage_end, StageEnd.model_validate, _stage_end_summary),
)}
assert tuple(KINDS) == GATE_KINDS, "the store's gate kinds and the registry's differ"

# which kinds each review mode stops at, read off the registry
REVIEWED: dict[str, frozenset[str]] = {mode: frozenset(k.name for k in KINDS.values() if mode in k.reviewed_in) for mode in REVIEW_MODES}


def kind_of(payload: GatePayload) -> GateKind:
    return KINDS[payload.KIND]


@dataclass(frozen=True)
class Gate(GateRecord):
    """A stored gate with its payload typed by its kind (what `pipeline.api` hands the faces)."""

    data: GatePayload | None = None

    @property
    def spec(self) -> GateKind:
        return KINDS[self.kind]

    @property
    def summary(self) -> str:
        return self.spec.summary(self.data)

    @classmethod
    def of(cls, record: GateRecord) -> Gate:
        if isinstance(record, Gate):
            return record
        fields = {name: getattr(record, name) for name in record.__dataclass_fields__}
        return cls(**fields, data=KINDS[record.kind].parse(record.payload))


def check_decision(gate: GateRecord, action: str, edit_text: str | None, *, feedback_heard: bool = True) -> Any:
    """The value to store as the decision's `after`, or DecisionError saying why the decision is refused."""
    typed = Gate.of(gate)
    refused = typed.spec.refusal(action, typed.data, feedback_heard=feedback_heard)
    if refused:
        raise DecisionError(refused)
    if action == "edit":
        if edit_text is None or not edit_text.strip():
            raise DecisionError("an edit needs the edited text (--file)")
        return typed.spec.edit(typed.data, edit_text)
    return None
