"""The store: one SQLite file (WAL, foreign keys on, a busy timeout) on sqlite-utils, a connection per thread.

It is the only channel between egg's processes: a worker writes sessions' gates, events, candidates and verdicts;
the CLI and the web app write sessions, decisions and cancel requests. Everything a report needs, and everything
a killed worker needs to resume at the same gate, is here.

One worker per session: a claim is one UPDATE that matches for one process only, and once a worker holds its claim
(`hold`) every write it makes is a transaction that first checks the claim is still its own (see connection.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from pipeline.store.connection import (BUSY_TIMEOUT_S, Claim, ClaimLost, Contention, Holder, StoreError, check_integrity, checked_path,
                                       describe, retrying)
from pipeline.store.migrations import migrations
from pipeline.store.records import BenchItemRecord, BenchRunRecord, CandidateRecord, DecisionRecord, EventRecord, GateRecord, SessionRecord

__all__ = ["BUSY_TIMEOUT_S", "Claim", "ClaimLost", "Contention", "GateClosed", "Holder", "Store", "StoreError", "now_text"]
T = TypeVar("T")
_SESSION_FIELDS = {"status", "stage", "error", "finished_at", "work_dir", "label", "worker_pid", "heartbeat_at"}
_SESSION_JSON_FIELDS = {"outcome": "outcome_json", "environment": "environment_json", "settings": "settings_json"}


class GateClosed(Exception):
    """A decision on a gate that already has one."""


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Store:
    """One SQLite file, safe to share between threads (each gets its own connection) and processes (WAL)."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S, contention: Contention = Contention()) -> None:
        """Open (creating or migrating) the store at `path`, made absolute; a path that cannot be an SQLite file, or
        a damaged one, is refused with a StoreError before anything is created beside it."""
        self.path = checked_path(path)
        self.busy_timeout_s, self.contention = busy_timeout_s, contention
        self.claim: Claim | None = None  # set by `hold`: the worker's writes are checked against it
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._noting_wait = False
        existed = self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if existed:
            self._retry(lambda: check_integrity(self.path, busy_timeout_s))
        with _file_lock(self.path.with_name(self.path.name + ".migrate.lock")):
            self._retry(lambda: migrations.apply(self.db))

    @property
    def db(self) -> Database:
        """This thread's connection (opened on first use)."""
        db = getattr(self._local, "db", None)
        if db is None:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error:
                conn.close()
                raise
            db = Database(conn)
            self._local.db = db
            with self._lock:
                self._connections.append(conn)
        return db

    def _retry(self, action: Callable[[], T]) -> T:
        value, waited = retrying(action, self.contention, self._describe)
        if waited:
            self._note_wait(waited)
        return value

    def _describe(self, error: sqlite3.Error) -> str:
        return describe(error, self.path, self.busy_timeout_s, self.contention.patience_s)

    def _note_wait(self, waited_s: float) -> None:
        """A worker's timeline says when the store made it wait (the note itself may wait too: it is not noted)."""
        if self.claim is None or self._noting_wait:
            return
        self._noting_wait = True
        try:
            self.add_event(self.claim.session_id, "warning", f"the store was locked by another process: this worker waited {waited_s:.1f} s and went on",
                           {"waited_s": round(waited_s, 3)})
        except StoreError:
            pass  # the retry already told stderr (the worker's log)
        finally:
            self._noting_wait = False

    def _write(self, action: Callable[[Database], T], *, checked: bool = True) -> T:
        """One write transaction (retried while the store is locked). A worker's write first checks that it still
        holds its session, in the same transaction: after its claim is taken, nothing it writes lands."""
        return self._retry(lambda: self._transaction(action, checked and self.claim is not None))

    def _transaction(self, action: Callable[[Database], T], check_claim: bool) -> T:
        db = self.db
        if db.conn.in_transaction:  # part of an outer write (sqlite-utils' atomic()): that one commits
            return action(db)
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            if check_claim:
                self._check_claim(db)
            value = action(db)
            db.conn.execute("COMMIT")
            return value
        except BaseException:
            if db.conn.in_transaction:
                db.conn.execute("ROLLBACK")
            raise

    def _check_claim(self, db: Database) -> None:
        row = db.conn.execute("SELECT worker_token FROM sessions WHERE id = ?", (self.claim.session_id,)).fetchone()
        if row is None or row[0] != self.claim.token:
            raise ClaimLost(f"session {self.claim.session_id} is held by another worker now")

    def hold(self, claim: Claim) -> None:
        """From now on every write through this store is this worker's, checked against its claim."""
        self.claim = claim

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    def _rows(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        return self._retry(lambda: list(self.db.query(sql, params)))

    def query(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        """Rows of a read-only query (the pages' joins), with the store's retries and its one-line errors."""
        return self._rows(sql, params)

    def _one(self, sql: str, params: tuple | dict = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _execute(self, sql: str, params: tuple | dict = ()) -> int | None:
        return self._write(lambda db: db.execute(sql, params).lastrowid)

    # bench runs (egg bench) -----------------------------------------------------------------------------------------

    def create_bench_run(self, run_id: str, *, out_dir: str, dirs: list[str], args: dict[str, Any],
                         items: list[dict[str, Any]], created_at: str | None = None) -> None:
        """A suite run and its items (problem, path, level, ordinal; pending unless they say otherwise), in one
        transaction."""
        def write(db: Database) -> None:
            db["bench_runs"].insert({"id": run_id, "created_at": created_at or now_text(), "out_dir": out_dir, "dirs_json": json.dumps(dirs),
                                     "args_json": json.dumps(args, sort_keys=True), "status": "running"})
            db["bench_items"].insert_all([{**item, "run_id": run_id} for item in items])
        self._write(write)

    def add_bench_items(self, run_id: str, items: list[dict[str, Any]]) -> None:
        """Items a resumed run found that it did not have (new files in its folders); existing ones are kept."""
        self._write(lambda db: db["bench_items"].insert_all([{**item, "run_id": run_id} for item in items], ignore=True))

    def bench_run(self, run_id: str) -> BenchRunRecord | None:
        row = self._one("SELECT * FROM bench_runs WHERE id = ?", (run_id,))
        return BenchRunRecord.from_row(row) if row else None

    def bench_runs(self) -> list[BenchRunRecord]:
        return [BenchRunRecord.from_row(r) for r in self._rows("SELECT * FROM bench_runs ORDER BY created_at DESC, id")]

    def update_bench_run(self, run_id: str, **fields: Any) -> None:
        values = {("args_json" if k == "args" else k): (json.dumps(v, sort_keys=True) if k == "args" else v) for k, v in fields.items()}
        self._write(lambda db: db["bench_runs"].update(run_id, values))

    def bench_items(self, run_id: str) -> list[BenchItemRecord]:
        rows = self._rows("SELECT * FROM bench_items WHERE run_id = ? ORDER BY ordinal, problem", (run_id,))
        return [BenchItemRecord.from_row(r) for r in rows]

    def update_bench_item(self, run_id: str, problem: str, **fields: Any) -> None:
        """Set an item's columns (status, story, session_id, slot, wall_s, started_at, finished_at; `row` as JSON)."""
        values = {("row_json" if k == "row" else k): (json.dumps(v, sort_keys=True) if k == "row" else v) for k, v in fields.items()}
        self._write(lambda db: db["bench_items"].update((run_id, problem), values))

    def bench_walls(self, paths: list[str]) -> dict[str, float]:
        """The longest wall seconds any finished bench item of each path took (to run the longest first)."""
        if not paths:
            return {}
        marks = ",".join("?" * len(paths))
        rows = self._rows(f"SELECT path, MAX(wall_s) AS wall FROM bench_items WHERE wall_s IS NOT NULL AND path IN ({marks}) GROUP BY path", tuple(paths))
        return {r["path"]: r["wall"] for r in rows}

    # sessions ------------------------------------------------------------------------------------------------------

    def create_session(self, session_id: str, *, problem_path: str, problem_name: str, problem_fp: str, problem_source: str,
                       backend: dict[str, Any], review: str, device: str, settings: dict[str, Any], work_dir: str = "",
                       parent_id: str | None = None, branch_gate_key: str | None = None, label: str = "") -> None:
        self._write(lambda db: db["sessions"].insert({
            "id": session_id, "created_at": now_text(), "problem_path": problem_path, "problem_name": problem_name,
            "problem_fp": problem_fp, "problem_source": problem_source, "backend_json": json.dumps(backend, sort_keys=True),
            "review": review, "device": device, "settings_json": json.dumps(settings, sort_keys=True), "status": "created",
            "work_dir": work_dir, "parent_id": parent_id, "branch_gate_key": branch_gate_key, "label": label,
        }))

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._one("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return SessionRecord.from_row(row) if row else None

    def problem_source(self, session_id: str) -> str:
        row = self._one("SELECT problem_source FROM sessions WHERE id = ?", (session_id,))
        return row["problem_source"] if row else ""

    def sessions(self, limit: int | None = None) -> list[SessionRecord]:
        sql = "SELECT * FROM sessions ORDER BY created_at DESC, id"
        return [SessionRecord.from_row(r) for r in self._rows(sql + (f" LIMIT {int(limit)}" if limit else ""))]

    def unstarted_session(self, label: str) -> SessionRecord | None:
        """The first session with this label that no worker has begun (one made just before its maker was killed)."""
        row = self._one("SELECT * FROM sessions WHERE label = ? AND status = 'created' ORDER BY created_at, id LIMIT 1", (label,))
        return SessionRecord.from_row(row) if row else None

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Set plain columns (status, stage, error, ...) and JSON ones (outcome, environment, settings)."""
        values: dict[str, Any] = {}
        for name, value in fields.items():
            if name in _SESSION_JSON_FIELDS:
                values[_SESSION_JSON_FIELDS[name]] = json.dumps(value, sort_keys=True)
            elif name in _SESSION_FIELDS:
                values[name] = value
            else:
                raise KeyError(f"not a session field: {name}")
        self._write(lambda db: db["sessions"].update(session_id, values))

    def holder(self, session_id: str) -> Holder | None:
        """Who holds the session now (token None: nobody); None when there is no such session."""
        row = self._one("SELECT worker_token, worker_pid, heartbeat_at FROM sessions WHERE id = ?", (session_id,))
        return Holder(row["worker_token"], row["worker_pid"], row["heartbeat_at"]) if row else None

    def claim_session(self, session_id: str, token: str, pid: int, stale_after_s: float, gone_token: str | None = None) -> bool:
        """Make this worker the session's only one: one UPDATE, so of workers claiming at once exactly one wins. It
        matches only while nobody holds the session, the holder's heartbeat is older than `stale_after_s`, or the
        holder is `gone_token` (a worker the caller saw is dead: its claim is taken over at once)."""
        now = time.time()
        sql = ("UPDATE sessions SET worker_token = ?, worker_pid = ?, heartbeat_at = ? WHERE id = ? "
               "AND (worker_token IS NULL OR heartbeat_at IS NULL OR heartbeat_at < ? OR worker_token = ?)")
        params = (token, pid, now, session_id, now - stale_after_s, gone_token)
        return self._write(lambda db: db.execute(sql, params).rowcount == 1, checked=False)

    def heartbeat(self, session_id: str, token: str) -> bool:
        """False once another worker holds the session (this one must stop). Not retried: the caller beats again."""
        cursor = self.db.execute("UPDATE sessions SET heartbeat_at = ? WHERE id = ? AND worker_token = ?", (time.time(), session_id, token))
        return cursor.rowcount == 1

    def release_session(self, session_id: str, token: str) -> None:
        sql = "UPDATE sessions SET worker_token = NULL, heartbeat_at = NULL, worker_pid = NULL WHERE id = ? AND worker_token = ?"
        self._write(lambda db: db.execute(sql, (session_id, token)), checked=False)

    def request_cancel(self, session_id: str) -> None:
        self._execute("UPDATE sessions SET cancel_requested = 1 WHERE id = ?", (session_id,))

    def cancel_requested(self, session_id: str) -> bool:
        row = self._one("SELECT cancel_requested FROM sessions WHERE id = ?", (session_id,))
        return bool(row and row["cancel_requested"])

    # candidates and verdicts ---------------------------------------------------------------------------------------

    def add_candidate(self, session_id: str, stage: str, origin: str, source: str, source_fp: str, parent_id: int | None,
                      note: str = "", author: str = "agent", key: str | None = None) -> int:
        """A candidate's id; the same `key` in a session (a replayed step) gives the row it made before."""
        if key is not None:
            row = self._one("SELECT id FROM candidates WHERE session_id = ? AND key = ?", (session_id, key))
            if row:
                return row["id"]
        return self._execute(
            "INSERT INTO candidates (session_id, stage, origin, parent_id, source_fp, source, note, author, key, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, stage, origin, parent_id, source_fp, source, note, author, key, now_text()),
        )

    def candidates(self, session_id: str) -> list[CandidateRecord]:
        rows = self._rows("SELECT id, session_id, stage, origin, parent_id, source_fp, note, author, created_at FROM candidates WHERE session_id = ? ORDER BY id", (session_id,))
        return [CandidateRecord.from_row(r) for r in rows]

    def candidate(self, candidate_id: int) -> CandidateRecord | None:
        row = self._one("SELECT id, session_id, stage, origin, parent_id, source_fp, note, author, created_at FROM candidates WHERE id = ?", (candidate_id,))
        return CandidateRecord.from_row(row) if row else None

    def candidate_source(self, candidate_id: int) -> str | None:
        row = self._one("SELECT source FROM candidates WHERE id = ?", (candidate_id,))
        return row["source"] if row else None

    def save_verdict(self, problem_fp: str, source_fp: str, options_key: str, status: str, result: dict[str, Any]) -> None:
        row = {"problem_fp": problem_fp, "source_fp": source_fp, "options_key": options_key, "status": status,
               "result_json": json.dumps(result), "created_at": now_text()}
        self._write(lambda db: db["verdicts"].upsert(row, pk=("problem_fp", "source_fp", "options_key")))

    def verdict(self, problem_fp: str, source_fp: str, options_key: str) -> dict[str, Any] | None:
        row = self._one("SELECT result_json FROM verdicts WHERE problem_fp = ? AND source_fp = ? AND options_key = ?", (problem_fp, source_fp, options_key))
        return json.loads(row["result_json"]) if row else None

    def verdicts_for(self, problem_fp: str, source_fps: list[str]) -> dict[str, dict[str, Any]]:
        """The stored verdicts of these sources on a problem (any options), newest first per source."""
        if not source_fps:
            return {}
        marks = ",".join("?" for _ in source_fps)
        rows = self._rows(f"SELECT source_fp, result_json FROM verdicts WHERE problem_fp = ? AND source_fp IN ({marks}) ORDER BY created_at", (problem_fp, *source_fps))
        return {r["source_fp"]: json.loads(r["result_json"]) for r in rows}

    # language-model exchanges (replayed on resume) and call records -----------------------------------------------

    def save_exchange(self, session_id: str, request_key: str, occurrence: int, exchange_json: str, request_json: str) -> None:
        row = {"session_id": session_id, "request_key": request_key, "occurrence": occurrence, "exchange_json": exchange_json,
               "request_json": request_json, "created_at": now_text()}
        self._write(lambda db: db["llm_exchanges"].upsert(row, pk=("session_id", "request_key", "occurrence")))

    def exchange(self, session_id: str, request_key: str, occurrence: int) -> str | None:
        row = self._one("SELECT exchange_json FROM llm_exchanges WHERE session_id = ? AND request_key = ? AND occurrence = ?", (session_id, request_key, occurrence))
        return row["exchange_json"] if row else None

    def requests(self, session_id: str) -> list[dict[str, Any]]:
        """Every request the session's model was sent (and answered), in order."""
        rows = self._rows("SELECT request_json FROM llm_exchanges WHERE session_id = ? ORDER BY created_at, rowid", (session_id,))
        return [json.loads(r["request_json"]) for r in rows]

    def request(self, session_id: str, request_key: str) -> dict[str, Any] | None:
        """The request the session's model was sent under this key (its first occurrence), or None."""
        row = self._one("SELECT request_json FROM llm_exchanges WHERE session_id = ? AND request_key = ? ORDER BY occurrence LIMIT 1",
                        (session_id, request_key))
        return json.loads(row["request_json"]) if row else None

    def add_call(self, session_id: str, record: dict[str, Any]) -> None:
        self._write(lambda db: db["llm_calls"].insert({"session_id": session_id, "record_json": json.dumps(record)}))

    def calls(self, session_id: str) -> list[dict[str, Any]]:
        return [json.loads(r["record_json"]) for r in self._rows("SELECT record_json FROM llm_calls WHERE session_id = ? ORDER BY id", (session_id,))]

    # stage checkpoints and profiles ------------------------------------------------------------------------------

    def save_stage(self, session_id: str, stage: str, status: str, state: dict[str, Any]) -> None:
        row = {"session_id": session_id, "stage": stage, "status": status, "state_json": json.dumps(state), "updated_at": now_text()}
        self._write(lambda db: db["stages"].upsert(row, pk=("session_id", "stage")))

    def stage(self, session_id: str, stage: str) -> tuple[str, dict[str, Any]] | None:
        row = self._one("SELECT status, state_json FROM stages WHERE session_id = ? AND stage = ?", (session_id, stage))
        return (row["status"], json.loads(row["state_json"])) if row else None

    def save_profile(self, problem_fp: str, source_fp: str, environment_fp: str, report: dict[str, Any]) -> None:
        row = {"problem_fp": problem_fp, "source_fp": source_fp, "environment_fp": environment_fp, "report_json": json.dumps(report), "created_at": now_text()}
        self._write(lambda db: db["profiles"].upsert(row, pk=("problem_fp", "source_fp", "environment_fp")))

    def profile(self, problem_fp: str, source_fp: str, environment_fp: str) -> dict[str, Any] | None:
        row = self._one("SELECT report_json FROM profiles WHERE problem_fp = ? AND source_fp = ? AND environment_fp = ?", (problem_fp, source_fp, environment_fp))
        return json.loads(row["report_json"]) if row else None

    # gates and decisions -------------------------------------------------------------------------------------------

    def open_gate(self, session_id: str, key: str, stage: str, kind: str, ordinal: int, reviewed: bool, payload: dict[str, Any]) -> GateRecord:
        """The gate with this key, made now if the session never reached it before (a resumed worker finds it)."""
        existing = self.gate_by_key(session_id, key)
        if existing is not None:
            return existing
        self._execute(
            "INSERT OR IGNORE INTO gates (session_id, key, stage, kind, ordinal, reviewed, payload_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, key, stage, kind, ordinal, int(reviewed), json.dumps(payload), now_text()),
        )
        return self.gate_by_key(session_id, key)

    def gate_by_key(self, session_id: str, key: str) -> GateRecord | None:
        row = self._one("SELECT * FROM gates WHERE session_id = ? AND key = ?", (session_id, key))
        return GateRecord.from_row(row, self._decision_of(row["id"])) if row else None

    def gate(self, gate_id: int) -> GateRecord | None:
        row = self._one("SELECT * FROM gates WHERE id = ?", (gate_id,))
        return GateRecord.from_row(row, self._decision_of(row["id"])) if row else None

    def gates(self, session_id: str, *, open_only: bool = False, with_payload: bool = True) -> list[GateRecord]:
        columns = "g.*" if with_payload else "g.id, g.session_id, g.key, g.stage, g.kind, g.ordinal, g.reviewed, '{}' AS payload_json, g.created_at"
        rows = self._rows(f"SELECT {columns}, d.id AS d_id FROM gates g LEFT JOIN decisions d ON d.gate_id = g.id WHERE g.session_id = ? ORDER BY g.id", (session_id,))
        decisions = {d.gate_id: d for d in self.decisions(session_id)}
        gates = [GateRecord.from_row(r, decisions.get(r["id"])) for r in rows]
        return [g for g in gates if g.open] if open_only else gates

    def open_gate_ids(self, session_id: str) -> list[int]:
        rows = self._rows("SELECT g.id FROM gates g LEFT JOIN decisions d ON d.gate_id = g.id WHERE g.session_id = ? AND d.id IS NULL AND g.reviewed ORDER BY g.id", (session_id,))
        return [r["id"] for r in rows]

    def stage_outcomes(self, session_id: str) -> dict[str, str]:
        """Each finished stage's decision summary ("best seed", "stopped by the reviewer", "skipped: ..."), from the
        stages' checkpoints (each holds every decision made up to it)."""
        outcomes: dict[str, str] = {}
        for row in self._rows("SELECT state_json FROM stages WHERE session_id = ?", (session_id,)):
            for decision in json.loads(row["state_json"]).get("decisions", []):
                outcomes.setdefault(decision["stage"], decision["summary"])
        return outcomes

    def handed_on(self, session_id: str) -> dict[str, int | None]:
        """The candidate each finished stage handed on (its checkpoint's best), by stage."""
        rows = self._rows("SELECT stage, json_extract(state_json, '$.best_id') AS best_id FROM stages WHERE session_id = ?", (session_id,))
        return {r["stage"]: r["best_id"] for r in rows}

    def decided_stage_ends(self, session_id: str) -> set[str]:
        rows = self._rows("SELECT DISTINCT g.stage FROM gates g JOIN decisions d ON d.gate_id = g.id WHERE g.session_id = ? AND g.kind = 'stage_end'", (session_id,))
        return {r["stage"] for r in rows}

    def _decision_of(self, gate_id: int) -> DecisionRecord | None:
        row = self._one("SELECT * FROM decisions WHERE gate_id = ?", (gate_id,))
        return DecisionRecord.from_row(row) if row else None

    def add_decision(self, gate_id: int, session_id: str, action: str, who: str, before: Any, after: Any, feedback: str = "") -> DecisionRecord:
        try:
            decision_id = self._execute(
                "INSERT INTO decisions (gate_id, session_id, action, who, at, before_json, after_json, feedback) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (gate_id, session_id, action, who, now_text(), json.dumps(before), None if after is None else json.dumps(after), feedback),
            )
        except sqlite3.IntegrityError as error:
            raise GateClosed(f"gate {gate_id} already has a decision") from error
        return DecisionRecord.from_row(self._one("SELECT * FROM decisions WHERE id = ?", (decision_id,)))

    def decisions(self, session_id: str) -> list[DecisionRecord]:
        return [DecisionRecord.from_row(r) for r in self._rows("SELECT * FROM decisions WHERE session_id = ? ORDER BY id", (session_id,))]

    # events and predictions ----------------------------------------------------------------------------------------

    def add_event(self, session_id: str, kind: str, message: str, data: dict[str, Any] | None = None) -> int:
        return self._execute("INSERT INTO events (session_id, at, kind, message, data_json) VALUES (?, ?, ?, ?, ?)",
                             (session_id, now_text(), kind, message, json.dumps(data or {})))

    def events(self, session_id: str, after_id: int = 0, limit: int = 1000) -> list[EventRecord]:
        rows = self._rows("SELECT * FROM events WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?", (session_id, after_id, limit))
        return [EventRecord.from_row(r) for r in rows]

    def events_tail(self, session_id: str, limit: int = 200) -> list[EventRecord]:
        """The session's last `limit` events, oldest first."""
        rows = self._rows("SELECT * FROM (SELECT * FROM events WHERE session_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id", (session_id, limit))
        return [EventRecord.from_row(r) for r in rows]

    def last_event_id(self, session_id: str) -> int:
        row = self._one("SELECT MAX(id) AS last FROM events WHERE session_id = ?", (session_id,))
        return (row and row["last"]) or 0

    def add_prediction(self, session_id: str, gate_key: str, who: str, predicted: str, actual: str) -> bool:
        correct = predicted == actual
        row = {"session_id": session_id, "gate_key": gate_key, "who": who, "predicted": predicted, "actual": actual,
               "correct": int(correct), "at": now_text()}
        self._write(lambda db: db["predictions"].insert(row))
        return correct

    def predictions(self, who: str | None = None) -> list[dict[str, Any]]:
        if who is None:
            return self._rows("SELECT * FROM predictions ORDER BY id")
        return self._rows("SELECT * FROM predictions WHERE who = ? ORDER BY id", (who,))

    # branching -----------------------------------------------------------------------------------------------------

    def copy_history(self, source_id: str, target_id: str, gate: GateRecord) -> None:
        """Give `target_id` what `source_id` had before `gate`: the model's replies (the branch replays them up to the
        gate) and the gates before it with their decisions. The gate itself stays open; verdicts are shared by all."""
        self._write(lambda db: self._copy_history(db, source_id, target_id, gate))

    def _copy_history(self, db: Database, source_id: str, target_id: str, gate: GateRecord) -> None:
        db.execute(
            "INSERT INTO llm_exchanges (session_id, request_key, occurrence, exchange_json, request_json, created_at) "
            "SELECT ?, request_key, occurrence, exchange_json, request_json, created_at FROM llm_exchanges WHERE session_id = ?",
            (target_id, source_id),
        )
        for earlier in self.gates(source_id):
            if earlier.id >= gate.id:
                break
            copy = self.open_gate(target_id, earlier.key, earlier.stage, earlier.kind, earlier.ordinal, earlier.reviewed, earlier.payload)
            if earlier.decision is not None:
                d = earlier.decision
                self.add_decision(copy.id, target_id, d.action, d.who, d.before, d.after, d.feedback)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
