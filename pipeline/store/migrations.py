"""The store's schema, as sqlite-utils migrations: applied once each, in order, recorded in `_sqlite_migrations`.

Never edit a migration that has shipped: append a new one. `m001_runs` is the schema of egg's first, hand-made
store (PRAGMA user_version 1); it is written with IF NOT EXISTS, so a database from that store passes through it
unchanged and is then migrated like any other.
"""

from __future__ import annotations

import json

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("egg")


@migrations()
def m001_runs(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE IF NOT EXISTS runs (
            id TEXT PRIMARY KEY, started_at TEXT NOT NULL, problem_path TEXT NOT NULL, problem_fp TEXT NOT NULL,
            settings_json TEXT NOT NULL, environment_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE TABLE IF NOT EXISTS candidates (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id), stage TEXT NOT NULL,
            origin TEXT NOT NULL, parent_id INTEGER, source_fp TEXT NOT NULL, source TEXT NOT NULL,
            note TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS verdicts (
            problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, options_key TEXT NOT NULL, status TEXT NOT NULL,
            result_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, options_key)
        );
        CREATE TABLE IF NOT EXISTS llm_exchanges (
            run_id TEXT NOT NULL, request_key TEXT NOT NULL, occurrence INTEGER NOT NULL, exchange_json TEXT NOT NULL,
            request_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (run_id, request_key, occurrence)
        );
        CREATE TABLE IF NOT EXISTS llm_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, record_json TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS stages (
            run_id TEXT NOT NULL, stage TEXT NOT NULL, status TEXT NOT NULL, state_json TEXT NOT NULL,
            updated_at TEXT NOT NULL, PRIMARY KEY (run_id, stage)
        );
        CREATE TABLE IF NOT EXISTS profiles (
            problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, environment_fp TEXT NOT NULL, report_json TEXT NOT NULL,
            created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, environment_fp)
        );
        """
    )


@migrations()
def m002_sessions(db: Database) -> None:
    """Runs become sessions (a problem through the method, a backend, a review mode); gates, decisions and events
    join them. Every row of a run keeps its id."""
    db.executescript(
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY, created_at TEXT NOT NULL, problem_path TEXT NOT NULL, problem_name TEXT NOT NULL,
            problem_fp TEXT NOT NULL, problem_source TEXT NOT NULL DEFAULT '', backend_json TEXT NOT NULL DEFAULT '{}',
            review TEXT NOT NULL DEFAULT 'auto', device TEXT NOT NULL DEFAULT 'auto', settings_json TEXT NOT NULL,
            status TEXT NOT NULL, stage TEXT NOT NULL DEFAULT '', work_dir TEXT NOT NULL DEFAULT '',
            parent_id TEXT REFERENCES sessions(id), branch_gate_key TEXT, label TEXT NOT NULL DEFAULT '',
            worker_pid INTEGER, worker_token TEXT, heartbeat_at REAL, cancel_requested INTEGER NOT NULL DEFAULT 0,
            error TEXT NOT NULL DEFAULT '', outcome_json TEXT NOT NULL DEFAULT '{}',
            environment_json TEXT NOT NULL DEFAULT '{}', finished_at TEXT
        );
        CREATE TABLE gates (
            id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id), key TEXT NOT NULL,
            stage TEXT NOT NULL, kind TEXT NOT NULL, ordinal INTEGER NOT NULL, reviewed INTEGER NOT NULL,
            payload_json TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (session_id, key)
        );
        CREATE TABLE decisions (
            id INTEGER PRIMARY KEY AUTOINCREMENT, gate_id INTEGER NOT NULL UNIQUE REFERENCES gates(id),
            session_id TEXT NOT NULL REFERENCES sessions(id), action TEXT NOT NULL, who TEXT NOT NULL, at TEXT NOT NULL,
            before_json TEXT NOT NULL, after_json TEXT, feedback TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            kind TEXT NOT NULL, message TEXT NOT NULL, data_json TEXT NOT NULL DEFAULT '{}'
        );
        CREATE TABLE predictions (
            id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
            gate_key TEXT NOT NULL, who TEXT NOT NULL, predicted TEXT NOT NULL, actual TEXT NOT NULL,
            correct INTEGER NOT NULL, at TEXT NOT NULL
        );
        CREATE INDEX events_by_session ON events (session_id, id);
        CREATE INDEX gates_by_session ON gates (session_id, id);
        """
    )
    for run in db.query("SELECT * FROM runs"):
        settings = json.loads(run["settings_json"])
        db["sessions"].insert(
            {
                "id": run["id"], "created_at": run["started_at"], "problem_path": run["problem_path"],
                "problem_name": run["problem_path"].rsplit("/", 1)[-1].removesuffix(".py"), "problem_fp": run["problem_fp"],
                "backend_json": json.dumps({"kind": "recorded", "describe": settings.get("model", "")}),
                "review": "auto", "device": settings.get("device", "auto"), "settings_json": run["settings_json"],
                "status": "done" if run["status"] == "done" else "failed", "environment_json": run["environment_json"],
                "finished_at": run["finished_at"],
            }
        )
    # The tables that named a run now name its session (a table is rebuilt to change its foreign key).
    for table in ("candidates", "llm_exchanges", "llm_calls", "stages"):
        db[table].transform(rename={"run_id": "session_id"}, drop_foreign_keys=["run_id"] if table == "candidates" else ())
        db[table].add_foreign_key("session_id", "sessions", "id")
    db["runs"].drop()
    db.executescript(
        """
        ALTER TABLE candidates ADD COLUMN author TEXT NOT NULL DEFAULT 'agent';
        ALTER TABLE candidates ADD COLUMN key TEXT;
        CREATE UNIQUE INDEX candidates_by_key ON candidates (session_id, key);
        CREATE INDEX candidates_by_session ON candidates (session_id, id);
        """
    )


@migrations()
def m003_bench(db: Database) -> None:
    """Suite runs (`egg bench`): a run, and one item per problem that names the session it ran as."""
    db.executescript(
        """
        CREATE TABLE bench_runs (
            id TEXT PRIMARY KEY, created_at TEXT NOT NULL, out_dir TEXT NOT NULL, dirs_json TEXT NOT NULL,
            args_json TEXT NOT NULL, status TEXT NOT NULL, finished_at TEXT
        );
        CREATE TABLE bench_items (
            run_id TEXT NOT NULL REFERENCES bench_runs(id), problem TEXT NOT NULL, path TEXT NOT NULL,
            level INTEGER, ordinal INTEGER NOT NULL, session_id TEXT REFERENCES sessions(id),
            status TEXT NOT NULL DEFAULT 'pending', story TEXT NOT NULL DEFAULT '', slot TEXT NOT NULL DEFAULT '',
            wall_s REAL, started_at TEXT, finished_at TEXT, row_json TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (run_id, problem)
        );
        """
    )
