"""Every bad input to `egg session` and `egg gate` is one line and exit status 2, and creates nothing: a damaged
store, a store locked past its busy timeout, files that are not UTF-8; and a relative --db is stored absolute."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import api
from pipeline.cli import app
from pipeline.store import Store
from tests.sessions.driver import SOFTMAX, SOFTMAX_KERNEL
from tests.store.test_store import session
from tests.ui.scripted import write_script

WIDE = {"COLUMNS": "400"}  # one line stays one line on the console


def egg(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env={**WIDE, **(env or {})})


def refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0 and message in result.output, result.output


def _damaged(path: Path) -> Path:
    store = Store(path)
    session(store)
    for _ in range(200):
        store.add_event("s1", "info", "x" * 500)
    store.close()
    with path.open("r+b") as handle:  # a page in the middle overwritten (no connection to it is open now)
        handle.seek(path.stat().st_size // 2)
        handle.write(os.urandom(4096))
    return path


def test_every_command_on_a_damaged_store_is_one_line_and_start_creates_nothing(tmp_path):
    db = str(_damaged(tmp_path / "egg.sqlite"))
    before = sorted(p.name for p in tmp_path.iterdir())
    commands = [["session", "list"], ["session", "show", "s1"], ["session", "events", "s1"], ["session", "resume", "s1"],
                ["session", "cancel", "s1"], ["session", "branch", "s1", "1"], ["session", "export", "s1", "--out", str(tmp_path / "out")],
                ["session", "replay", "s1"], ["session", "import"], ["gate", "list", "s1"], ["gate", "decide", "s1", "1", "skip"],
                ["session", "start", str(SOFTMAX), "--no-llm"]]
    for command in commands:
        refused(egg(*command, "--db", db), "is damaged")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no sessions folder, no WAL left open


def test_a_decision_on_a_store_locked_past_its_busy_timeout_is_one_line_and_not_kept(tmp_path):
    db = tmp_path / "egg.sqlite"
    store = Store(db)
    session(store)
    gate = store.open_gate("s1", "algorithm/kernel/0/x", "algorithm", "kernel", 0, True, {"proposal": None})
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        result = egg("gate", "decide", "s1", str(gate.id), "skip", "--db", str(db), env={"EGG_BUSY_TIMEOUT_S": "0.3"})
    finally:
        lock.execute("COMMIT")
    refused(result, f"the store {db} is locked by another process (waited 0.3 s): try again when it is free")
    assert store.gate(gate.id).decision is None


def test_files_that_are_not_utf8_are_one_line_and_create_nothing(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes(SOFTMAX.read_bytes().replace(b"import torch", b"# caf\xe9\nimport torch", 1))
    db = tmp_path / "new" / "egg.sqlite"
    refused(egg("session", "start", str(latin), "--no-llm", "--db", str(db)), "not UTF-8 text (byte 0xe9")
    assert not db.parent.exists()
    store = Store(tmp_path / "egg.sqlite")
    session(store)
    gate = store.open_gate("s1", "algorithm/kernel/0/x", "algorithm", "kernel", 0, True, {"proposal": None})
    refused(egg("gate", "decide", "s1", str(gate.id), "edit", "--file", str(latin), "--db", str(store.path)), "not UTF-8 text (byte 0xe9")
    assert store.gate(gate.id).decision is None


def test_a_kernel_with_a_byte_order_mark_is_a_valid_edit(tmp_path):
    bom = tmp_path / "bom_kernel.py"
    bom.write_bytes(b"\xef\xbb\xbf" + SOFTMAX_KERNEL.read_bytes())
    store = Store(tmp_path / "egg.sqlite")
    session(store)
    gate = store.open_gate("s1", "algorithm/kernel/0/x", "algorithm", "kernel", 0, True, {"proposal": None})
    result = egg("gate", "decide", "s1", str(gate.id), "edit", "--file", str(bom), "--db", str(store.path))
    assert result.exit_code == 0, result.output
    assert store.gate(gate.id).decision.after == SOFTMAX_KERNEL.read_text()


def test_a_relative_db_is_stored_absolute_so_export_works_from_another_folder(tmp_path):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    run = lambda cwd, *args: subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, capture_output=True, text=True,
                                            timeout=300, env={**os.environ, **WIDE}, check=True)
    started = run(here, "session", "start", str(SOFTMAX), "--no-llm", "--review", "auto", "--device", "cpu", "--seeds", "1", "--rounds", "0",
                  "--no-transforms", "--tune-evals", "0", "--db", "stores/egg.sqlite", "--json")
    first = json.loads(started.stdout.splitlines()[0])
    assert first["db"] == str(here / "stores" / "egg.sqlite") and first["work_dir"] == str(here / "stores" / "sessions" / first["id"])
    run(elsewhere, "session", "export", first["id"], "--out", "exported", "--db", str(here / "stores" / "egg.sqlite"))
    assert sorted(p.name for p in (elsewhere / "exported").iterdir()) == ["best.py", "evidence.json", "report.md"]
    assert api.get_session(api.open_store(here / "stores" / "egg.sqlite"), first["id"]).work_dir == first["work_dir"]


def test_an_uploaded_problem_must_be_utf8_and_its_byte_order_mark_is_dropped():
    assert api.uploaded_source(b"\xef\xbb\xbf" + SOFTMAX.read_bytes(), "softmax.py") == SOFTMAX.read_text()
    with pytest.raises(api.ApiError, match=r"^latin.py: not UTF-8 text \(byte 0xe9 at offset 5\): save it as UTF-8$"):
        api.uploaded_source(b"# caf\xe9\n", "latin.py")


def test_egg_optimize_on_a_store_that_is_not_sqlite_is_one_line(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "egg.sqlite").write_text("not a database\n")
    script = write_script(tmp_path / "script.yaml")
    refused(egg("optimize", str(SOFTMAX), "--script", str(script), "--device", "cpu", "--out", str(tmp_path / "out")), "is not an SQLite database")
