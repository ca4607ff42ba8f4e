"""One session at a time times kernels on a GPU: an advisory file lock per device, shared by every process of the
machine (whatever database they use), held only while a candidate is judged or profiled."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from pipeline.types import Candidate, EvalOptions, EvalResult, Problem


def lock_path(device: str) -> Path:
    folder = Path(os.environ.get("EGG_LOCK_DIR") or Path(tempfile.gettempdir()) / "egg-locks")
    folder.mkdir(parents=True, exist_ok=True)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "none"
    return folder / f"{device}-{visible}.lock"


class DeviceLock:
    """`with lock:` waits until no other process holds the device; `on_wait` is told once when it has to wait."""

    def __init__(self, device: str, on_wait: Callable[[], None] = lambda: None) -> None:
        self.path, self.on_wait = lock_path(device), on_wait
        self._handle = None
        self._depth = 0

    def __enter__(self) -> DeviceLock:
        if self._depth == 0:
            self._handle = open(self.path, "a")
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.on_wait()
                fcntl.flock(self._handle, fcntl.LOCK_EX)
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


class LockedJudge:
    """A judge whose evaluations hold the device's lock (on a GPU; the CPU's interpreter times nothing)."""

    def __init__(self, judge, lock: DeviceLock | None) -> None:
        self.judge, self.lock = judge, lock

    @property
    def options(self) -> EvalOptions:
        return self.judge.options

    def evaluate(self, problem: Problem, candidate: Candidate, **kwargs) -> EvalResult:
        if self.lock is None:
            return self.judge.evaluate(problem, candidate, **kwargs)
        with self.lock:
            return self.judge.evaluate(problem, candidate, **kwargs)
