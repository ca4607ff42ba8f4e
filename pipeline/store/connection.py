"""How egg opens its SQLite file and talks to it: the path checked before anything is created beside it, the file's
integrity checked before it is used, contention retried with backoff for a bounded time, and every failure turned
into one line that names the file.

A worker's writes also carry its claim (`Claim`): each write is one transaction that first checks that the worker
still holds its session, so a worker whose claim was taken writes nothing more (`ClaimLost`).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

BUSY_TIMEOUT_S = 30.0
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.05, 5.0
T = TypeVar("T")


class StoreError(Exception):
    """The store cannot be used as asked: not an SQLite file, damaged, or locked past every retry. One line."""


class ClaimLost(BaseException):
    """Another worker holds this worker's session now: it must stop at once and write nothing more. A BaseException,
    like KeyboardInterrupt, so no loop that survives a failing step (`except Exception`) can swallow it."""


@dataclass(frozen=True)
class Claim:
    """A worker's hold on one session: the token its claim wrote into the session's row."""

    session_id: str
    token: str


@dataclass(frozen=True)
class Holder:
    """Who holds a session now, as its row says."""

    token: str | None
    pid: int | None
    heartbeat_at: float | None


def checked_path(path: str | Path) -> Path:
    """The store's absolute path, refused (StoreError) before anything is created when it cannot be an SQLite file:
    a folder, or a device such as /dev/null. Only stat() looks at it: opening and closing the file outside SQLite
    would drop the POSIX locks this process's connections hold on it (and let another process reset the WAL under
    them)."""
    absolute = Path(path).expanduser().resolve()
    if not absolute.exists():
        return absolute
    if absolute.is_dir():
        raise StoreError(f"the store {absolute} is a folder: give the path of an SQLite file")
    if not absolute.is_file():
        raise StoreError(f"the store {absolute} is not a regular file: give the path of an SQLite file")
    return absolute


def check_integrity(path: Path, busy_timeout_s: float) -> None:
    """A file that is not an SQLite database, or a damaged one, is refused before anything reads or writes it
    (PRAGMA quick_check, on a connection of its own that is closed again)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as error:
        if "not a database" in str(error):
            raise StoreError(f"the store {path} is not an SQLite database: give egg's database, or a new file") from None
        raise
    finally:
        conn.close()
    if rows != [("ok",)]:
        first = str(rows[0][0]).replace("\n", " ") if rows else "no answer"
        raise StoreError(f"the store {path} is damaged ({first}): restore it from a copy, or use another file")


def is_contention(error: BaseException) -> bool:
    """Another process holds the database's lock (past the busy timeout)."""
    return isinstance(error, sqlite3.OperationalError) and any(word in str(error).lower() for word in ("locked", "busy"))


def describe(error: sqlite3.Error, path: Path, busy_timeout_s: float, patience_s: float) -> str:
    """One line for a failure of the store."""
    if is_contention(error):
        waited = f"{busy_timeout_s:g} s" + (f" and retried for {patience_s:g} s" if patience_s else "")
        return f"the store {path} is locked by another process (waited {waited}): try again when it is free"
    text = str(error)
    if any(word in text.lower() for word in ("malformed", "not a database", "corrupt")):
        return f"the store {path} is damaged ({text}): restore it from a copy, or use another file"
    return f"the store {path}: {text}"


@dataclass(frozen=True)
class Contention:
    """How long a caller keeps trying a locked store after SQLite's own busy timeout: 0 for a person's command (it
    says so at once), minutes for a worker (a session is not lost to a long lock). `on_wait` hears each retry."""

    patience_s: float = 0.0
    on_wait: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True)


def retrying(action: Callable[[], T], contention: Contention, describe_error: Callable[[sqlite3.Error], str]) -> tuple[T, float]:
    """`action()` retried with backoff while the store is locked, for `contention.patience_s` at most; its value and
    the seconds spent waiting (0.0 when it went through at once). Any other failure is a StoreError at once."""
    started, delay = time.monotonic(), BACKOFF_FIRST_S
    while True:
        try:
            return action(), (time.monotonic() - started if delay > BACKOFF_FIRST_S else 0.0)
        except (sqlite3.IntegrityError, ClaimLost):
            raise
        except sqlite3.DatabaseError as error:
            waited = time.monotonic() - started
            if not is_contention(error) or waited + delay > contention.patience_s:
                raise StoreError(describe_error(error)) from None
            contention.on_wait(f"egg store: locked by another process for {waited:.1f} s; retrying in {delay:.2f} s")
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
