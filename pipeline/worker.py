"""The session worker: one process runs one session from the store, never a web server.

    python -m pipeline.worker --db PATH --session ID

One worker per session, always. Its claim is one UPDATE that matches for one process only (a second worker on a
session whose holder is alive and beating exits at once, with status 3); every write it makes then checks, in the
same transaction, that the claim is still its own. It heartbeats from a thread of its own that survives a failing
or locked store (it beats again a second later), and stops the worker at once when the claim is found taken. It
waits at gates by watching the store, and honours a cancel request. It holds its session's model key only (none for
an expert, scripted or person's session). Killed at any moment, even with SIGKILL, it leaves nothing half-written
that a new worker cannot take over: the next one re-runs the session from the store and reaches the same gate.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable

from pipeline.store import Claim, ClaimLost, Holder, Store, StoreError

HEARTBEAT_S = 1.0
STALE_AFTER_S = 10.0  # a heartbeat older than this means the worker is gone
EXIT_CLAIMED = 3  # another live worker has the session (or took it over)
HARD_STOP_AFTER_S = 5.0  # a worker that lost its claim and has not stopped by then is ended outright


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} egg worker {os.getpid()}: {message}", file=sys.stderr, flush=True)


class Heartbeat(threading.Thread):
    """Writes the worker's heartbeat every second until stopped (its own connection: one per thread). A failing
    beat is logged and tried again; a beat that finds another worker's token calls `on_lost` and ends the thread."""

    def __init__(self, store: Store, claim: Claim, on_lost: Callable[[], None]) -> None:
        super().__init__(daemon=True, name="egg-heartbeat")
        self.store, self.claim, self.on_lost = store, claim, on_lost
        self.stopped = threading.Event()

    def run(self) -> None:
        failing = False
        while not self.stopped.wait(HEARTBEAT_S):
            try:
                held = self.store.heartbeat(self.claim.session_id, self.claim.token)
            except Exception as error:  # a locked or failing store: the beat is tried again, the thread never dies
                if not failing:
                    log(f"heartbeat failed ({type(error).__name__}: {error}); beating again every {HEARTBEAT_S:g} s")
                failing = True
                continue
            if failing:
                log("heartbeat written again")
            failing = False
            if not held and not self.stopped.is_set():
                self.on_lost()
                return


def gone_token(holder: Holder | None) -> str | None:
    """The holder's token when its process is dead (a killed worker: its claim is taken over now, not in 10 s)."""
    from pipeline.api import pid_alive

    if holder is None or holder.token is None or holder.pid is None:
        return None
    return None if pid_alive(holder.pid) else holder.token


def claim(store: Store, session_id: str) -> Claim | None:
    """This process's claim on the session, or None when a live worker holds it."""
    token = uuid.uuid4().hex
    if not store.claim_session(session_id, token, os.getpid(), STALE_AFTER_S, gone_token(store.holder(session_id))):
        return None
    store.hold(Claim(session_id, token))
    return store.claim


def _stop_main_thread(hard: bool) -> Callable[[], None]:
    """What the heartbeat does when the claim is lost: raise ClaimLost in the main thread now (a signal wakes it
    from a sleep or a wait), and with `hard`, end the process outright if it has not stopped a few seconds later."""
    main = threading.main_thread()

    def stop() -> None:
        log("another worker holds this session now: stopping, writing nothing more")
        signal.pthread_kill(main.ident, signal.SIGUSR1)
        if hard:
            timer = threading.Timer(HARD_STOP_AFTER_S, os._exit, (EXIT_CLAIMED,))
            timer.daemon = True
            timer.start()

    return stop


def _raise_claim_lost(signum, frame) -> None:
    raise ClaimLost("another worker holds this session now")


def keep_own_key(backend: dict) -> list[str]:
    """Drop every model key but the session's own from this process's environment; the names it held before."""
    from pipeline.sessions.backends import MODEL_KEY_VARIABLES, BackendSpec

    held = sorted(name for name in MODEL_KEY_VARIABLES if os.environ.get(name))
    own = BackendSpec.from_json(backend).key_variable()
    for name in MODEL_KEY_VARIABLES:
        if name != own:
            os.environ.pop(name, None)
    return held


def work(db: str, session_id: str, echo=None, hard_stop: bool = False) -> int:
    """Run one session to its end (or to a cancel); the exit status says how it ended (3: another worker has it)."""
    from pipeline.api import open_worker_store
    from pipeline.judge.isolation import make_undumpable

    make_undumpable()  # this process holds the user's keys: other processes of this uid cannot read its /proc files
    try:
        store = open_worker_store(db)
        record = store.session(session_id)
    except StoreError as error:
        log(str(error))
        return 2
    if record is None:
        log(f"no session {session_id} in {db}")
        return 2
    if record.finished:
        log(f"session {session_id} is already {record.status}")
        return 0
    held = claim(store, session_id)
    if held is None:
        log(f"session {session_id} is run by another live worker (pid {store.holder(session_id).pid})")
        return EXIT_CLAIMED
    try:
        return _run_claimed(store, held, echo, hard_stop)
    finally:
        store.close()


def _run_claimed(store: Store, held: Claim, echo, hard_stop: bool) -> int:
    record = store.session(held.session_id)
    if record.finished:  # it ended between the first look and the claim
        store.release_session(held.session_id, held.token)
        return 0
    keys = keep_own_key(record.backend)
    store.add_event(held.session_id, "worker", f"worker {os.getpid()} holds the session; model keys in its environment: {', '.join(keys) or 'none'}",
                    {"pid": os.getpid(), "keys": keys})
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGUSR1, _raise_claim_lost) if in_main else None
    beat = Heartbeat(store, held, _stop_main_thread(hard_stop) if in_main else lambda: None)
    beat.start()
    try:
        return _drive(store, held, echo)
    finally:
        try:
            if in_main:
                signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            beat.stopped.set()
            store.release_session(held.session_id, held.token)  # matches nothing when the claim was taken
        except (ClaimLost, StoreError) as error:
            log(f"could not release the session: {error}")
        finally:
            if in_main:
                signal.signal(signal.SIGUSR1, previous)


def _drive(store: Store, held: Claim, echo) -> int:
    from pipeline.sessions.runner import drive

    try:
        drive(store, held.session_id, echo=echo)
        return 0 if store.session(held.session_id).status in ("done", "cancelled") else 1
    except ClaimLost:
        log("stopped: the session's claim is another worker's")
        return EXIT_CLAIMED
    except Exception as error:  # drive has recorded how the session ended; the worker's log says why
        log(f"the session stopped: {type(error).__name__}: {error}")
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.worker", description="Run one egg session from the store.")
    parser.add_argument("--db", required=True, help="the store (SQLite file)")
    parser.add_argument("--session", required=True, help="the session id")
    args = parser.parse_args(argv)
    return work(args.db, args.session, echo=lambda message: print(message, flush=True), hard_stop=True)


if __name__ == "__main__":
    sys.exit(main())
