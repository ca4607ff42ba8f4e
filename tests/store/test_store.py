"""The store on sqlite-utils: migrations (an old run store is migrated, not refused), WAL, foreign keys, a
connection per thread, and gates and decisions as the worker and a person write them."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from pipeline.store import GateClosed, Store

# The hand-made store's schema (PRAGMA user_version 1), as databases written before the move to sqlite-utils have it.
OLD_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, started_at TEXT NOT NULL, problem_path TEXT NOT NULL, problem_fp TEXT NOT NULL,
    settings_json TEXT NOT NULL, environment_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL, finished_at TEXT);
CREATE TABLE candidates (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id), stage TEXT NOT NULL,
    origin TEXT NOT NULL, parent_id INTEGER, source_fp TEXT NOT NULL, source TEXT NOT NULL, note TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL);
CREATE TABLE verdicts (problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, options_key TEXT NOT NULL, status TEXT NOT NULL,
    result_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, options_key));
CREATE TABLE llm_exchanges (run_id TEXT NOT NULL, request_key TEXT NOT NULL, occurrence INTEGER NOT NULL,
    exchange_json TEXT NOT NULL, request_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (run_id, request_key, occurrence));
CREATE TABLE llm_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, record_json TEXT NOT NULL);
CREATE TABLE stages (run_id TEXT NOT NULL, stage TEXT NOT NULL, status TEXT NOT NULL, state_json TEXT NOT NULL,
    updated_at TEXT NOT NULL, PRIMARY KEY (run_id, stage));
CREATE TABLE profiles (problem_fp TEXT NOT NULL, source_fp TEXT NOT NULL, environment_fp TEXT NOT NULL, report_json TEXT NOT NULL,
    created_at TEXT NOT NULL, PRIMARY KEY (problem_fp, source_fp, environment_fp));
PRAGMA user_version = 1;
"""


def old_database(path) -> None:
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO runs VALUES ('r1', '2026-11-30T00:00:00', '/p/level1/23_Softmax.py', 'pfp', '{\"model\": \"script s.yaml\", \"device\": \"cpu\"}', '{\"torch\": \"2.13\"}', 'done', '2026-11-30T00:01:00')")
    db.execute("INSERT INTO candidates (run_id, stage, origin, parent_id, source_fp, source, note, created_at) VALUES ('r1', 'algorithm', 'seed', NULL, 'sfp', 'SOURCE', 'n', 't')")
    db.execute("INSERT INTO verdicts VALUES ('pfp', 'sfp', 'k', 'ok', '{\"status\": \"ok\"}', 't')")
    db.execute("INSERT INTO llm_exchanges VALUES ('r1', 'key', 0, '{\"x\": 1}', '{}', 't')")
    db.execute("INSERT INTO llm_calls (run_id, record_json) VALUES ('r1', '{\"calls\": 1}')")
    db.execute("INSERT INTO stages VALUES ('r1', 'algorithm', 'done', '{\"best_id\": 1}', 't')")
    db.commit()
    db.close()


def session(store: Store, session_id: str = "s1") -> None:
    store.create_session(session_id, problem_path="/p.py", problem_name="p", problem_fp="pfp", problem_source="src", backend={"kind": "none"},
                         review="every", device="cpu", settings={})


def test_a_database_of_the_old_store_is_migrated_with_everything_in_it(tmp_path):
    path = tmp_path / "egg.sqlite"
    old_database(path)
    store = Store(path)
    record = store.session("r1")
    assert (record.status, record.review, record.problem_name, record.environment) == ("done", "auto", "23_Softmax", {"torch": "2.13"})
    assert [c.id for c in store.candidates("r1")] == [1] and store.candidate_source(1) == "SOURCE"
    assert store.verdict("pfp", "sfp", "k") == {"status": "ok"}
    assert store.exchange("r1", "key", 0) == '{"x": 1}' and store.calls("r1") == [{"calls": 1}]
    assert store.stage("r1", "algorithm") == ("done", {"best_id": 1})
    assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert [r["name"] for r in store.db.query("SELECT name FROM _sqlite_migrations")] == ["m001_runs", "m002_sessions", "m003_bench"]
    store.close()
    assert Store(path).session("r1").status == "done"  # opening it again applies nothing twice


def test_wal_foreign_keys_and_a_busy_timeout_on_every_connection(tmp_path):
    store = Store(tmp_path / "egg.sqlite", busy_timeout_s=7)
    seen = {}

    def read_pragmas(name: str) -> None:
        db = store.db
        seen[name] = (db.execute("PRAGMA journal_mode").fetchone()[0], db.execute("PRAGMA foreign_keys").fetchone()[0],
                      db.execute("PRAGMA busy_timeout").fetchone()[0], id(db.conn))

    threads = [threading.Thread(target=read_pragmas, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    read_pragmas("main")
    assert {v[:3] for v in seen.values()} == {("wal", 1, 7000)}
    assert len({v[3] for v in seen.values()}) == 4  # one connection per thread
    with pytest.raises(sqlite3.IntegrityError):
        store.add_candidate("no-such-session", "algorithm", "seed", "s", "fp", None)


def test_threads_and_a_second_process_handle_write_one_file_at_once(tmp_path):
    path = tmp_path / "egg.sqlite"
    store, other = Store(path), Store(path)
    session(store)
    errors = []

    def write(handle: Store, tag: str) -> None:
        try:
            for i in range(50):
                handle.add_event("s1", "info", f"{tag} {i}")
        except Exception as error:  # pragma: no cover - the assertion below shows it
            errors.append(error)

    threads = [threading.Thread(target=write, args=(h, f"w{i}")) for i, h in enumerate((store, other, store, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(store.events("s1")) == 200


def test_a_gate_is_made_once_per_key_and_takes_one_decision(tmp_path):
    store = Store(tmp_path / "egg.sqlite")
    session(store)
    gate = store.open_gate("s1", "algorithm/kernel/0/abc", "algorithm", "kernel", 0, True, {"proposal": "x"})
    again = store.open_gate("s1", "algorithm/kernel/0/abc", "algorithm", "kernel", 0, True, {"proposal": "changed"})
    assert again.id == gate.id and again.payload == {"proposal": "x"} and again.open
    decision = store.add_decision(gate.id, "s1", "reject", "ana", "x", None, "too slow")
    assert (decision.action, decision.who, decision.before, decision.feedback) == ("reject", "ana", "x", "too slow")
    with pytest.raises(GateClosed):
        store.add_decision(gate.id, "s1", "approve", "bob", "x", None)
    assert [g.decision.action for g in store.gates("s1")] == ["reject"] and store.gates("s1", open_only=True) == []


def test_a_candidate_key_gives_back_the_row_a_replay_made_before(tmp_path):
    store = Store(tmp_path / "egg.sqlite")
    session(store)
    first = store.add_candidate("s1", "algorithm", "seed", "src", "fp", None, key="algorithm/seed/None/fp")
    assert store.add_candidate("s1", "algorithm", "seed", "src", "fp", None, key="algorithm/seed/None/fp") == first
    assert store.add_candidate("s1", "algorithm", "seed", "src", "fp", None, key="algorithm/seed/7/fp") != first
