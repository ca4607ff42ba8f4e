"""The store's rows as frozen values: what the engine, the CLI and the pages read back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SESSION_STATUSES = ("created", "running", "waiting", "interrupted", "done", "failed", "cancelled")
FINISHED = ("done", "failed", "cancelled")
GATE_KINDS = ("plan", "kernel", "verdict", "stage_end")
ACTIONS = ("approve", "edit", "reject", "skip", "stop")


@dataclass(frozen=True)
class SessionRecord:
    id: str
    created_at: str
    problem_path: str
    problem_name: str
    problem_fp: str
    backend: dict[str, Any]
    review: str
    device: str
    settings: dict[str, Any]
    status: str
    stage: str
    work_dir: str
    parent_id: str | None
    branch_gate_key: str | None
    label: str
    worker_pid: int | None
    heartbeat_at: float | None
    cancel_requested: bool
    error: str
    outcome: dict[str, Any]
    environment: dict[str, str]
    finished_at: str | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def resumable(self) -> bool:
        """A worker may (re)start it: anything not done or cancelled (a failed one is retried)."""
        return self.status not in ("done", "cancelled")

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SessionRecord:
        return cls(
            id=row["id"], created_at=row["created_at"], problem_path=row["problem_path"], problem_name=row["problem_name"],
            problem_fp=row["problem_fp"], backend=json.loads(row["backend_json"]), review=row["review"], device=row["device"],
            settings=json.loads(row["settings_json"]), status=row["status"], stage=row["stage"], work_dir=row["work_dir"],
            parent_id=row["parent_id"], branch_gate_key=row["branch_gate_key"], label=row["label"],
            worker_pid=row["worker_pid"], heartbeat_at=row["heartbeat_at"], cancel_requested=bool(row["cancel_requested"]),
            error=row["error"], outcome=json.loads(row["outcome_json"]), environment=json.loads(row["environment_json"]),
            finished_at=row["finished_at"],
        )


@dataclass(frozen=True)
class DecisionRecord:
    """One decision on one gate: appended, never updated (the audit trail and the teaching record)."""

    id: int
    gate_id: int
    session_id: str
    action: str
    who: str
    at: str
    before: Any
    after: Any
    feedback: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DecisionRecord:
        after = json.loads(row["after_json"]) if row["after_json"] is not None else None
        return cls(row["id"], row["gate_id"], row["session_id"], row["action"], row["who"], row["at"],
                   json.loads(row["before_json"]), after, row["feedback"])


@dataclass(frozen=True)
class GateRecord:
    """A point where the engine stops for a person. `reviewed` is False when the session's review mode let it pass
    on its own (its decision is then `approve` by `auto`)."""

    id: int
    session_id: str
    key: str
    stage: str
    kind: str
    ordinal: int
    reviewed: bool
    payload: dict[str, Any]
    created_at: str
    decision: DecisionRecord | None = None

    @property
    def open(self) -> bool:
        """Waiting for a person: undecided and reviewed (a gate the review mode does not show is decided `auto` the
        moment it is written, and is never a person's to decide, not even in that moment)."""
        return self.decision is None and bool(self.reviewed)

    @classmethod
    def from_row(cls, row: dict[str, Any], decision: DecisionRecord | None = None) -> GateRecord:
        return cls(row["id"], row["session_id"], row["key"], row["stage"], row["kind"], row["ordinal"], bool(row["reviewed"]),
                   json.loads(row["payload_json"]), row["created_at"], decision)


@dataclass(frozen=True)
class EventRecord:
    id: int
    session_id: str
    at: str
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EventRecord:
        return cls(row["id"], row["session_id"], row["at"], row["kind"], row["message"], json.loads(row["data_json"]))


@dataclass(frozen=True)
class CandidateRecord:
    id: int
    session_id: str
    stage: str
    origin: str
    parent_id: int | None
    source_fp: str
    note: str
    author: str
    created_at: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CandidateRecord:
        return cls(row["id"], row["session_id"], row["stage"], row["origin"], row["parent_id"], row["source_fp"], row["note"],
                   row["author"], row["created_at"])


BENCH_ITEM_DONE = ("done", "failed", "crashed", "hang", "error")  # an item that ended (the summary's "done")
# What --resume keeps: everything that ended, but a crash (a worker killed from outside, even with SIGKILL, is a cut
# to run again from its session; a problem that kills its worker each time costs one more try per resume).
BENCH_RESUME_KEEPS = ("done", "failed", "hang", "error")


@dataclass(frozen=True)
class BenchRunRecord:
    id: str
    created_at: str
    out_dir: str
    dirs: list[str]
    args: dict[str, Any]
    status: str  # running, done, interrupted
    finished_at: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BenchRunRecord:
        return cls(row["id"], row["created_at"], row["out_dir"], json.loads(row["dirs_json"]), json.loads(row["args_json"]),
                   row["status"], row["finished_at"])


@dataclass(frozen=True)
class BenchItemRecord:
    run_id: str
    problem: str  # its name in the suite: the path below the folder given, without .py (level1/19_ReLU)
    path: str
    level: int | None
    ordinal: int
    session_id: str | None
    status: str  # pending, running, then one of BENCH_ITEM_DONE or interrupted
    story: str  # what happened, in a line or a few (a crash's or a hang's account)
    slot: str  # the GPU (or CPU slot) it ran on
    wall_s: float | None
    started_at: str | None
    finished_at: str | None
    row: dict[str, Any]  # its line of results.jsonl

    @property
    def finished(self) -> bool:
        return self.status in BENCH_ITEM_DONE

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BenchItemRecord:
        return cls(row["run_id"], row["problem"], row["path"], row["level"], row["ordinal"], row["session_id"], row["status"],
                   row["story"], row["slot"], row["wall_s"], row["started_at"], row["finished_at"], json.loads(row["row_json"]))
