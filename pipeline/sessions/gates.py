"""Gates: where the engine stops for a person, and the rulings it gets back.

A gate's key is deterministic (stage, kind, its ordinal in the stage, the fingerprint of what it shows), so a
worker that re-runs a session from the store reaches the same gate rows, finds their decisions and goes on: this
is what makes a killed worker resume at the same gate. A gate that the session's review mode does not stop at is
still a row, decided `approve` (or `skip`, when nothing was proposed) by `auto`: the audit trail stays whole and
any gate can be branched from.
"""

from __future__ import annotations

import collections
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.sessions.gatekinds import REVIEW_MODES, REVIEWED, GatePayload, kind_of
from pipeline.store import Store
from pipeline.store.records import GateRecord

__all__ = ["REVIEW_MODES", "REVIEWED", "Ruling", "SessionCancelled", "StoreGates"]
POLL_S = 0.2


class SessionCancelled(Exception):
    """The session's cancel request was seen; the worker ends it as `cancelled`."""


@dataclass(frozen=True)
class Ruling:
    """What a gate gives back to the engine: the action, the edited value (parsed and validated), the feedback,
    and the gate's key (so that what answers the decision can name it)."""

    action: str
    value: Any = None
    feedback: str = ""
    gate_key: str = ""


def payload_fingerprint(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


class StoreGates:
    """Gates kept in the store for one session; `ask` blocks (polling the store) until a decision is there."""

    def __init__(self, store: Store, session_id: str, review: str, *, on_wait: Callable[[GateRecord], None] = lambda gate: None,
                 on_resume: Callable[[GateRecord], None] = lambda gate: None, poll_s: float = POLL_S) -> None:
        if review not in REVIEW_MODES:
            raise ValueError(f"review mode must be one of {', '.join(REVIEW_MODES)}, not {review!r}")
        self.store, self.session_id, self.review = store, session_id, review
        self.on_wait, self.on_resume, self.poll_s = on_wait, on_resume, poll_s
        self._ordinals: collections.Counter[tuple[str, str]] = collections.Counter()

    def ask(self, stage: str, typed: GatePayload, identity: dict[str, Any] | None = None) -> Ruling:
        """`identity` is what makes the gate the same gate in a replay or a branch (no row ids, no paths); it
        defaults to the whole payload."""
        spec = kind_of(typed)
        kind = spec.name
        payload = typed.model_dump(mode="json")
        ordinal = self._ordinals[(stage, kind)]
        self._ordinals[(stage, kind)] += 1
        key = f"{stage}/{kind}/{ordinal}/{payload_fingerprint(payload if identity is None else identity)}"
        reviewed = self.review in spec.reviewed_in
        gate = self.store.open_gate(self.session_id, key, stage, kind, ordinal, reviewed, payload)
        if gate.decision is None and not gate.reviewed:
            action = "approve" if "approve" in spec.allowed(typed) else "skip"
            self.store.add_decision(gate.id, self.session_id, action, "auto", payload.get("proposal"), None)
            gate = self.store.gate(gate.id)
        if gate.decision is None:
            gate = self._wait(gate)
        decision = gate.decision
        value = spec.read_edit(decision.after) if decision.action == "edit" else None
        return Ruling(decision.action, value, decision.feedback, gate.key)

    def checkpoint(self) -> None:
        """Between steps: end the session now if a cancel was asked for."""
        if self.store.cancel_requested(self.session_id):
            raise SessionCancelled("cancelled on request")

    def _wait(self, gate: GateRecord) -> GateRecord:
        self.on_wait(gate)
        while True:
            self.checkpoint()
            current = self.store.gate(gate.id)
            if current.decision is not None:
                self.on_resume(current)
                return current
            time.sleep(self.poll_s)
