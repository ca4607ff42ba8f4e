"""The run store: SQLite (WAL) with migrations; everything a report needs and a killed run needs to resume."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Applied in order, once each; the database's user_version counts those applied. Never edit one: append.
MIGRATIONS = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY, started_at TEXT NOT NULL, problem_path TEXT NOT NULL, problem_fp TEXT NOT NULL,
        settings_json TEXT NOT NULL, environment_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE candidates (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id), stage TEXT NOT NULL,
        origin TEXT NOT NULL, parent_id INTEGER, source_fp TEXT NOT NULL, source TEXT NOT NULL,
        note TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL
    );
    CREATE TABLE verdicts (
        problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, options_key TEXT NOT NULL, status TEXT NOT NULL,
        result_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, options_key)
    );
    CREATE TABLE llm_exchanges (
        run_id TEXT NOT NULL, request_key TEXT NOT NULL, occurrence INTEGER NOT NULL, exchange_json TEXT NOT NULL,
        request_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (run_id, request_key, occurrence)
    );
    CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, record_json TEXT NOT NULL
    );
    CREATE TABLE stages (
        run_id TEXT NOT NULL, stage TEXT NOT NULL, status TEXT NOT NULL, state_json TEXT NOT NULL,
        updated_at TEXT NOT NULL, PRIMARY KEY (run_id, stage)
    );
    CREATE TABLE profiles (
        problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, environment_fp TEXT NOT NULL, report_json TEXT NOT NULL,
        created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, environment_fp)
    );
    """,
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Store:
    """One SQLite file. Safe to share between threads of one process (one connection, one lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._lock = threading.Lock()
        self._migrate()

    def _migrate(self) -> None:
        applied = self._db.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(MIGRATIONS[applied:], start=applied + 1):
            self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, params: tuple = ()) -> int:
        with self._lock:
            return self._db.execute(sql, params).lastrowid

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # runs --------------------------------------------------------------------------------------------------------

    def start_run(self, run_id: str, problem_path: str, problem_fp: str, settings: dict[str, Any]) -> None:
        self._write(
            "INSERT INTO runs (id, started_at, problem_path, problem_fp, settings_json, status) VALUES (?, ?, ?, ?, ?, 'running')",
            (run_id, _now(), problem_path, problem_fp, json.dumps(settings, sort_keys=True)),
        )

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._read("SELECT id, problem_path, problem_fp, settings_json, status FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        rid, path, fp, settings, status = rows[0]
        return {"id": rid, "problem_path": path, "problem_fp": fp, "settings": json.loads(settings), "status": status}

    def finish_run(self, run_id: str, status: str, environment: dict[str, str]) -> None:
        self._write("UPDATE runs SET status = ?, finished_at = ?, environment_json = ? WHERE id = ?", (status, _now(), json.dumps(environment), run_id))

    # candidates and verdicts ---------------------------------------------------------------------------------------

    def add_candidate(self, run_id: str, stage: str, origin: str, source: str, source_fp: str, parent_id: int | None, note: str = "") -> int:
        return self._write(
            "INSERT INTO candidates (run_id, stage, origin, parent_id, source_fp, source, note, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, stage, origin, parent_id, source_fp, source, note, _now()),
        )

    def candidates(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT id, stage, origin, parent_id, source_fp, note FROM candidates WHERE run_id = ? ORDER BY id", (run_id,))
        return [dict(zip(("id", "stage", "origin", "parent_id", "source_fp", "note"), r)) for r in rows]

    def save_verdict(self, problem_fp: str, source_fp: str, options_key: str, status: str, result: dict[str, Any]) -> None:
        self._write(
            "INSERT OR REPLACE INTO verdicts (problem_fp, source_fp, options_key, status, result_json, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (problem_fp, source_fp, options_key, status, json.dumps(result), _now()),
        )

    def verdict(self, problem_fp: str, source_fp: str, options_key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT result_json FROM verdicts WHERE problem_fp = ? AND source_fp = ? AND options_key = ?", (problem_fp, source_fp, options_key))
        return json.loads(rows[0][0]) if rows else None

    # language-model exchanges (replayed on resume) and call records -----------------------------------------------

    def save_exchange(self, run_id: str, request_key: str, occurrence: int, exchange_json: str, request_json: str) -> None:
        self._write(
            "INSERT OR REPLACE INTO llm_exchanges (run_id, request_key, occurrence, exchange_json, request_json, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, request_key, occurrence, exchange_json, request_json, _now()),
        )

    def exchange(self, run_id: str, request_key: str, occurrence: int) -> str | None:
        rows = self._read("SELECT exchange_json FROM llm_exchanges WHERE run_id = ? AND request_key = ? AND occurrence = ?", (run_id, request_key, occurrence))
        return rows[0][0] if rows else None

    def add_call(self, run_id: str, record: dict[str, Any]) -> None:
        self._write("INSERT INTO llm_calls (run_id, record_json) VALUES (?, ?)", (run_id, json.dumps(record)))

    def calls(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self._read("SELECT record_json FROM llm_calls WHERE run_id = ? ORDER BY id", (run_id,))]

    # stage checkpoints ---------------------------------------------------------------------------------------------

    def save_stage(self, run_id: str, stage: str, status: str, state: dict[str, Any]) -> None:
        self._write(
            "INSERT OR REPLACE INTO stages (run_id, stage, status, state_json, updated_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, stage, status, json.dumps(state), _now()),
        )

    def stage(self, run_id: str, stage: str) -> tuple[str, dict[str, Any]] | None:
        rows = self._read("SELECT status, state_json FROM stages WHERE run_id = ? AND stage = ?", (run_id, stage))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None
