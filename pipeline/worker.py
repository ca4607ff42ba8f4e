"""The session worker: one process runs one session from the store, never a web server.

    python -m pipeline.worker --db PATH --session ID

It claims the session (a second worker on a session whose heartbeat is fresh exits at once), heartbeats from a
thread of its own, waits at gates by watching the store, and honours a cancel request. Killed at any moment, even
with SIGKILL, it leaves nothing half-written that a new worker cannot take over: the next one re-runs the session
from the store and reaches the same gate.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid

from pipeline.store import Store

HEARTBEAT_S = 1.0
STALE_AFTER_S = 10.0  # a heartbeat older than this means the worker is gone
EXIT_CLAIMED = 3  # another live worker has the session


class Heartbeat(threading.Thread):
    """Writes the worker's heartbeat every second until stopped (its own connection: one per thread)."""

    def __init__(self, store: Store, session_id: str, token: str) -> None:
        super().__init__(daemon=True, name="egg-heartbeat")
        self.store, self.session_id, self.token = store, session_id, token
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_S):
            self.store.heartbeat(self.session_id, self.token)


def work(db: str, session_id: str, echo=None) -> int:
    """Run one session to its end (or to a cancel); the exit status says how it ended."""
    from pipeline.judge.isolation import make_undumpable

    make_undumpable()  # this process holds the user's keys: other processes of this uid cannot read its /proc files
    store = Store(db)
    record = store.session(session_id)
    if record is None:
        print(f"egg worker: no session {session_id} in {db}", file=sys.stderr)
        return 2
    if record.finished:
        print(f"egg worker: session {session_id} is already {record.status}", file=sys.stderr)
        return 0
    token = uuid.uuid4().hex
    from pipeline.api import pid_alive

    stale_after = STALE_AFTER_S if record.worker_pid and pid_alive(record.worker_pid) else 0.0  # a dead worker's claim lapses now
    if not store.claim_session(session_id, token, os.getpid(), stale_after):
        print(f"egg worker: session {session_id} is run by another live worker (pid {record.worker_pid})", file=sys.stderr)
        return EXIT_CLAIMED
    beat = Heartbeat(store, session_id, token)
    beat.start()
    try:
        from pipeline.sessions.runner import drive

        drive(store, session_id, echo=echo)
        return 0 if store.session(session_id).status in ("done", "cancelled") else 1
    except Exception:
        return 1
    finally:
        beat.stopped.set()
        store.release_session(session_id, token)
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.worker", description="Run one egg session from the store.")
    parser.add_argument("--db", required=True, help="the store (SQLite file)")
    parser.add_argument("--session", required=True, help="the session id")
    args = parser.parse_args(argv)
    return work(args.db, args.session, echo=lambda message: print(message, flush=True))


if __name__ == "__main__":
    sys.exit(main())
