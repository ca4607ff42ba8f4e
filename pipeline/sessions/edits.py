"""Which decisions a gate takes, and what an edit must be. The same rules refuse a bad decision before it is stored
(pipeline.api) and read a stored one back for the engine (gates.StoreGates), so a bad edit never reaches an agent."""

from __future__ import annotations

import ast
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.agents.replies import Diagnosis
from pipeline.store.records import ACTIONS, GateRecord


class DecisionError(ValueError):
    """A decision a gate cannot take; the message is one line for the person."""


class TravellingDecision(BaseModel):
    """One decision that travels to the next stage (the paper's selective context)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    stage: str
    summary: str = Field(min_length=1)


class StageEnd(BaseModel):
    """What a stage hands on: its decisions and the kernel the next stage starts from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decisions: list[TravellingDecision]
    best_id: int | None = Field(description="the candidate the next stage starts from; one of the passing candidates")


def check_decision(gate: GateRecord, action: str, edit_text: str | None, *, feedback_heard: bool = True) -> Any:
    """The value to store as the decision's `after`, or DecisionError saying why the decision is refused.
    `feedback_heard`: False where nobody reads a rejection's feedback (the `none` backend)."""
    if action not in ACTIONS:
        raise DecisionError(f"unknown decision {action!r}: one of {', '.join(ACTIONS)}")
    if action == "reject" and not feedback_heard and gate.kind != "stage_end":
        instead = "skip it" if gate.kind == "verdict" else f"edit the {gate.kind}, skip or stop"
        raise DecisionError(f"nobody reads a rejection in this session (backend none: a person writes the kernels): {instead}")
    if action == "edit":
        if edit_text is None or not edit_text.strip():
            raise DecisionError("an edit needs the edited text (--file)")
        return _validated_edit(gate, edit_text)
    if action == "approve" and gate.kind in ("plan", "kernel") and gate.payload.get("proposal") is None:
        raise DecisionError(f"nothing was proposed at this {gate.kind} gate: give one with edit, or skip")
    if gate.kind == "stage_end" and action in ("reject",):
        raise DecisionError("a stage end is approved, edited (the decisions that travel) or stopped")
    return None


def _validated_edit(gate: GateRecord, text: str) -> Any:
    if gate.kind == "plan":
        try:
            return Diagnosis.model_validate_json(text).model_dump(mode="json")
        except ValidationError as error:
            raise DecisionError(f"the plan is not a valid Diagnosis: {_first_error(error)}") from None
    if gate.kind == "kernel":
        check_kernel_source(text)
        return text
    if gate.kind == "stage_end":
        try:
            end = StageEnd.model_validate_json(text)
        except ValidationError as error:
            raise DecisionError(f"not a valid stage end: {_first_error(error)}") from None
        choices = {c["id"] for c in gate.payload.get("choices", [])}
        if end.best_id is not None and end.best_id not in choices:
            raise DecisionError(f"best_id {end.best_id} is not a passing candidate of this session ({sorted(choices) or 'none'})")
        return end.model_dump(mode="json")
    raise DecisionError("a verdict is not edited: approve (accept it), reject or skip it; edit the kernel at its kernel gate")


def check_kernel_source(text: str) -> None:
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise DecisionError(f"the kernel does not parse: line {error.lineno}: {error.msg}") from None
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        raise DecisionError("the kernel defines no class ModelNew at its top level")


def parse_edit(kind: str, after: Any, payload: dict[str, Any]) -> Any:
    """A stored edit as the engine uses it (it was validated when it was stored)."""
    if kind == "plan":
        return Diagnosis.model_validate(after)
    if kind == "stage_end":
        return StageEnd.model_validate(after)
    return after


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "the document"
    return f"{where}: {first['msg']}" + (f" ({len(error.errors()) - 1} more)" if len(error.errors()) > 1 else "")
