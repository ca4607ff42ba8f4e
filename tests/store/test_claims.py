"""One worker per session, and contention that does not end one: the claim is one UPDATE that exactly one of many
processes wins, a worker whose claim was taken writes nothing more, and a lock longer than the busy timeout is
waited out (and noted in the timeline) by a worker, but told in one line to a person."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time

import pytest

from pipeline.store import Claim, ClaimLost, Contention, Store, StoreError
from tests.store.test_store import session


def _claim_at_once(path: str, token: str, start: float, results) -> None:
    store = Store(path)
    time.sleep(max(0.0, start - time.time()))
    results.put((token, store.claim_session("s1", token, multiprocessing.current_process().pid, 10.0)))


def test_of_six_processes_claiming_one_session_at_once_exactly_one_wins(tmp_path):
    path = tmp_path / "egg.sqlite"
    session(Store(path))
    results = multiprocessing.get_context("fork").Queue()
    start = time.time() + 0.5
    workers = [multiprocessing.get_context("fork").Process(target=_claim_at_once, args=(str(path), f"t{i}", start, results)) for i in range(6)]
    for worker in workers:
        worker.start()
    outcomes = dict(results.get(timeout=30) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    [winner] = [token for token, won in outcomes.items() if won]
    assert Store(path).holder("s1").token == winner


def test_a_live_holders_claim_is_not_taken_a_dead_ones_is_taken_at_once(tmp_path):
    store = Store(tmp_path / "egg.sqlite")
    session(store)
    assert store.claim_session("s1", "first", 111, 10.0)
    assert not store.claim_session("s1", "second", 222, 10.0)  # its heartbeat is fresh
    assert not store.claim_session("s1", "second", 222, 10.0, gone_token="someone-else")
    assert store.claim_session("s1", "second", 222, 10.0, gone_token="first")  # the caller saw pid 111 is dead
    assert store.holder("s1").token == "second" and store.holder("s1").pid == 222


def test_a_worker_whose_claim_was_taken_writes_nothing_more_and_its_heartbeat_says_so(tmp_path):
    path = tmp_path / "egg.sqlite"
    worker, other = Store(path), Store(path)
    session(worker)
    assert worker.claim_session("s1", "mine", 1, 10.0)
    worker.hold(Claim("s1", "mine"))
    worker.add_event("s1", "info", "written while the claim holds")
    assert other.claim_session("s1", "theirs", 2, stale_after_s=0.0)  # as a second worker does once the heartbeat is stale
    for write in (lambda: worker.add_event("s1", "info", "late"), lambda: worker.update_session("s1", status="done"),
                  lambda: worker.add_candidate("s1", "algorithm", "seed", "src", "fp", None),
                  lambda: worker.save_verdict("pfp", "fp", "k", "ok", {"status": "ok"}),
                  lambda: worker.open_gate("s1", "k/1", "algorithm", "kernel", 0, True, {})):
        with pytest.raises(ClaimLost):
            write()
    assert [e.message for e in other.events("s1")] == ["written while the claim holds"]
    assert other.session("s1").status == "created" and other.candidates("s1") == [] and other.gates("s1") == []
    assert other.verdict("pfp", "fp", "k") is None
    assert worker.heartbeat("s1", "mine") is False


def _hold_the_write_lock(path, seconds: float, held: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    held.set()
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


def test_a_worker_waits_out_a_lock_longer_than_its_busy_timeout_and_notes_the_wait(tmp_path):
    path = tmp_path / "egg.sqlite"
    store = Store(path, busy_timeout_s=0.2, contention=Contention(patience_s=10.0, on_wait=lambda message: None))
    session(store)
    assert store.claim_session("s1", "mine", 1, 10.0)
    store.hold(Claim("s1", "mine"))
    held = threading.Event()
    locker = threading.Thread(target=_hold_the_write_lock, args=(path, 1.0, held))
    locker.start()
    held.wait(5)
    store.add_event("s1", "info", "after the lock")
    locker.join()
    events = store.events("s1")
    assert [e.message for e in events][0] == "after the lock"
    [note] = [e for e in events if e.kind == "warning"]
    assert note.message.startswith("the store was locked by another process") and note.data["waited_s"] >= 0.5


def test_a_persons_command_on_a_locked_store_gets_one_line_naming_it(tmp_path):
    path = tmp_path / "egg.sqlite"
    store = Store(path, busy_timeout_s=0.2)
    session(store)
    held = threading.Event()
    locker = threading.Thread(target=_hold_the_write_lock, args=(path, 1.0, held))
    locker.start()
    held.wait(5)
    with pytest.raises(StoreError) as refused:
        store.request_cancel("s1")
    locker.join()
    assert str(refused.value) == f"the store {path} is locked by another process (waited 0.2 s): try again when it is free"
    assert not store.cancel_requested("s1")
