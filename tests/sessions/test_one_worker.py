"""One worker per session, with its own key only, and sessions that outlive contention: real worker processes
started by the CLI on one SQLite file (issue 22, items 2, 5 and 6)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import api
from pipeline.llm.errors import LLMCallError
from pipeline.sessions.backends import BackendSpec, worker_environment
from pipeline.sessions.runner import ending
from pipeline.store import StoreError
from tests.sessions.driver import SOFTMAX, Egg, wait_gone
from tests.ui.scripted import write_script

NO_MODEL = ("--no-llm", "--review", "every", "--device", "cpu", "--seeds", "1", "--rounds", "1", "--no-transforms")
SCRIPTED_AUTO = ("--review", "auto", "--device", "cpu", "--seeds", "1", "--rounds", "0", "--no-transforms", "--tune-evals", "0")
KEYS = {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "test-anthropic", "EGG_LLM_API_KEY": "test-custom"}


@pytest.fixture
def egg(tmp_path) -> Egg:
    """The CLI on this test's store; every worker still running on that store is killed when the test ends."""
    yield Egg(tmp_path / "egg.sqlite", tmp_path)
    for pid in workers_on(tmp_path / "egg.sqlite"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def workers_on(db: Path) -> list[int]:
    """The worker processes whose --db is `db` (this test's own: no other test uses its folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"pipeline.worker" in command and str(db).encode() in command:
            found.append(int(entry.name))
    return found


def wait_for(check, what: str, timeout_s: float = 60):
    """`check()`'s value once it is truthy (the store read directly: a CLI call per poll costs a second here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} in {timeout_s} s")


def worker_pid(egg: Egg, session_id: str) -> int:
    """The pid of the worker holding the session, once it holds it."""
    store = api.open_store(egg.db)
    return wait_for(lambda: (h := store.holder(session_id)).token and h.pid, f"worker holding {session_id}")


def open_gate(egg: Egg, session_id: str):
    store = api.open_store(egg.db)
    return wait_for(lambda: store.gates(session_id, open_only=True), f"open gate in {session_id}")[0]


def status(egg: Egg, session_id: str, wanted: tuple[str, ...], timeout_s: float = 120) -> str:
    store = api.open_store(egg.db)
    return wait_for(lambda: (s := store.session(session_id).status) in wanted and s, f"status {wanted} of {session_id}", timeout_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def worker_log(egg: Egg, session_id: str) -> str:
    return (Path(api.get_session(api.open_store(egg.db), session_id).work_dir) / "worker.log").read_text()


def test_a_worker_holds_its_own_providers_key_and_an_expert_one_none(egg, monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    backends = {BackendSpec("llm", "anthropic:claude-sonnet-4-5"): ["ANTHROPIC_API_KEY"],
                BackendSpec("llm", "openai:qwen@http://127.0.0.1:9/v1"): ["EGG_LLM_API_KEY"], BackendSpec("expert"): []}
    store = api.open_store(egg.db)
    started = {}
    for spec in backends:  # as `egg session start --detach` and the New session page start them
        started[spec] = api.create_session(store, problem_path=SOFTMAX, backend=spec, device="cpu").id
        api.start_worker(store, started[spec])
    for spec, keys in backends.items():
        pid = worker_pid(egg, started[spec])
        [event] = wait_for(lambda: [e for e in store.events(started[spec]) if e.data.get("keys") is not None], "keys event")
        assert event.data["keys"] == keys, spec  # what the worker found in its own environment
        try:  # what it was started with, as /proc shows it (readable as root: the worker is undumpable)
            environ = dict(entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry)
        except PermissionError:
            continue
        assert sorted(name for name in KEYS if name in environ) == keys, spec
        assert all(environ[name] == KEYS[name] for name in keys)


def test_the_environment_a_worker_gets_keeps_its_providers_key_only():
    parent = {**KEYS, "PATH": "/bin", "HOME": "/root"}
    assert worker_environment(BackendSpec("llm", "anthropic:claude-sonnet-4-5"), parent) == {"ANTHROPIC_API_KEY": "test-anthropic", "PATH": "/bin", "HOME": "/root"}
    assert worker_environment(BackendSpec("llm", "openai:gpt-5.1"), parent)["OPENAI_API_KEY"] == "sk-test-openai"
    for spec in (BackendSpec("expert"), BackendSpec("none")):
        assert worker_environment(spec, parent) == {"PATH": "/bin", "HOME": "/root"}


def test_two_resumes_at_the_same_moment_leave_exactly_one_worker(egg):
    session_id = egg.start(SOFTMAX, *NO_MODEL)
    gate = open_gate(egg, session_id)
    first = worker_pid(egg, session_id)
    os.killpg(first, signal.SIGKILL)
    wait_gone(first)
    command = [sys.executable, "-m", "pipeline.cli", "session", "resume", session_id, "--detach", "--db", str(egg.db)]
    resumes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
               for _ in range(2)]
    said = [r.communicate(timeout=60)[1] for r in resumes]
    pids = [int(re.search(r"worker (\d+) resumes", text).group(1)) for text in said]
    deadline = time.monotonic() + 30
    while all(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # a loser would have stopped by now; a second winner would still run
    running = [pid for pid in pids if alive(pid)]
    assert running == [worker_pid(egg, session_id)]
    assert "is run by another live worker" in worker_log(egg, session_id)
    assert open_gate(egg, session_id).id == gate.id  # the one worker waits at the same gate
    os.killpg(running[0], signal.SIGKILL)


def test_a_worker_whose_claim_is_taken_stops_at_once_and_writes_nothing_more(egg, tmp_path):
    session_id = egg.start(SOFTMAX, *NO_MODEL)
    gate = open_gate(egg, session_id)
    pid = worker_pid(egg, session_id)
    store = api.open_store(egg.db)
    assert store.claim_session(session_id, "another-worker", os.getpid(), stale_after_s=0.0)  # as one does once a heartbeat is stale
    events = len(store.events(session_id))  # counted once the claim is gone: the old worker may log until then
    api.decide(store, session_id, gate.id, "skip")  # work the old worker must not do
    wait_gone(pid, timeout_s=10)
    assert len(store.events(session_id)) == events and store.candidates(session_id) == []
    assert store.holder(session_id).token == "another-worker"
    assert "stopped: the session's claim is another worker's" in worker_log(egg, session_id)


def _lock_until_the_worker_waits(db: Path, log: Path, beyond_s: float, timeout_s: float = 120) -> None:
    """Hold the store's write lock until the worker's log says it is waiting on it, and `beyond_s` longer."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    deadline = time.monotonic() + timeout_s
    while "egg store: locked by another process" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(beyond_s)
    conn.execute("COMMIT")
    conn.close()


def test_a_lock_held_past_the_busy_timeout_while_judging_is_waited_out_and_the_session_finishes(egg, tmp_path, monkeypatch):
    monkeypatch.setenv("EGG_BUSY_TIMEOUT_S", "0.5")
    session_id = egg.start(SOFTMAX, "--script", str(write_script(tmp_path / "script.yaml")), *SCRIPTED_AUTO)
    store = api.open_store(egg.db)
    wait_for(lambda: any(e.kind == "judging" for e in store.events(session_id)), "judging event", 120)
    log = Path(api.get_session(store, session_id).work_dir) / "worker.log"
    _lock_until_the_worker_waits(egg.db, log, beyond_s=2.5)
    assert status(egg, session_id, ("done", "failed", "interrupted"), timeout_s=240) == "done", api.get_session(store, session_id)
    text = log.read_text()
    assert "heartbeat failed" in text and "heartbeat written again" in text  # the heartbeat thread lived through it
    assert any(e.kind == "warning" and e.message.startswith("the store was locked by another process") for e in store.events(session_id))


def test_a_failed_session_is_retried_by_resume_and_egg_says_so(egg, tmp_path):
    script = write_script(tmp_path / "script.yaml")
    store = api.open_store(egg.db)
    record = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("script", str(script)), device="cpu")
    script.rename(tmp_path / "away.yaml")  # a dead end: the worker cannot build its backend
    api.start_worker(store, record.id)
    status(egg, record.id, ("failed",))
    error = api.get_session(store, record.id).error
    assert error.startswith("BackendError") and "away" not in error
    (tmp_path / "away.yaml").rename(script)
    said = egg.run("session", "resume", record.id, "--detach").stderr
    assert said.startswith(f"session {record.id} had failed (BackendError") and "retrying it from the store" in said
    assert open_gate(egg, record.id).kind == "kernel"  # it runs again, to its first gate
    assert status(egg, record.id, ("waiting",)) == "waiting" and api.get_session(store, record.id).error == ""
    assert any(e.kind == "retry" for e in store.events(record.id))
    api.kill_worker(store, record.id)


def test_an_infrastructure_fault_interrupts_a_session_and_a_dead_end_fails_it():
    from pipeline.llm.accounting import CallRecord

    def call_error(status: str) -> LLMCallError:
        return LLMCallError(CallRecord(started_at="2026-12-01T00:00:00Z", provider="openai", model="m", base_url=None, request_key="k",
                                       status=status, error="down", input_tokens=0, output_tokens=0, latency_s=1.0, cost_usd=None, attempts=()))

    assert ending(StoreError("the store x is locked")) == "interrupted"
    assert ending(OSError(28, "No space left on device")) == "interrupted"
    assert ending(call_error("connection_error")) == "interrupted"
    assert ending(call_error("auth_error")) == "failed"
    assert ending(ValueError("a script that no longer loads")) == "failed"
    assert ending(KeyboardInterrupt()) == ""


def test_a_killed_worker_nobody_reaped_is_not_alive():
    """A worker killed after its parent died stays a zombie where init reaps nothing: its pid still answers
    `kill(pid, 0)`, yet nothing runs there, and a resumed driver must not wait on it (nor refuse to take over)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert api.pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 30
        while api.pid_alive(child.pid) and time.monotonic() < deadline:  # the kill lands: a zombie, not yet reaped
            time.sleep(0.05)
        assert not api.pid_alive(child.pid)
        os.kill(child.pid, 0)  # the pid is still there: the test saw a zombie, not a reaped process
    finally:
        child.wait()
    assert not api.pid_alive(child.pid)
