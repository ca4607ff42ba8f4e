"""Batched measurement: many configurations of one kernel, checked and timed in one long-lived worker process.

`BatchMeasurer` is an `Evaluator`. It starts `python -m pipeline.tuning.worker` in the judge's sandbox
(pipeline.judge.launcher: its own namespaces and user, no secret, its own process group), sets the kernel and its
launch up once (inputs on the device, the reference output), and then sends configurations one at a time, so that a configuration that hangs or crashes the process is named and
the worker restarted for the rest. Every outcome is a status; only a kernel file or recipe that cannot be set up
at all stops the measurement (`MeasureError`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.recipe import LaunchRecipe
from pipeline.tuning.space import Config
from pipeline.types import HEAD_START_MODES

if TYPE_CHECKING:
    from pipeline.judge.launcher import Started

LOG_TAIL_CHARS = 3000


class MeasureError(RuntimeError):
    """The kernel could not be set up for measurement (bad file, bad recipe, failing reference, dead worker)."""


@dataclass(frozen=True)
class MeasureSettings:
    """How hard each configuration is measured, and how long it may take."""

    device: str = "cuda"  # "cpu": Triton's interpreter; outputs are checked, timing is skipped
    warmup: int = 3
    trials: int = 30
    probe_trials: int = 3  # timed first; a config this far behind the best stops here
    too_slow_factor: float = 1.5
    l2_flush_bytes: int = 256 << 20
    warmup_ms: float = 100.0  # calls back to back before the trials (not before the probe), as EvalOptions.warmup_ms
    head_start_mode: str = "until_launched"  # as the judge's EvalOptions.head_start_mode
    head_start_ms: float = 2.0  # as the judge's EvalOptions.head_start_ms
    config_timeout_s: float = 120.0  # compile, check and timing of one configuration
    setup_timeout_s: float = 600.0  # importing the kernel, making the inputs, the reference run
    max_worker_deaths: int = 5

    def __post_init__(self) -> None:
        if self.head_start_mode not in HEAD_START_MODES:
            raise ValueError(f"head_start_mode must be one of {', '.join(HEAD_START_MODES)}, not {self.head_start_mode!r}")


class BatchMeasurer:
    """Measures configurations of one kernel launch in a long-lived worker. Use as a context manager."""

    def __init__(self, kernel_path: str | os.PathLike, recipe: LaunchRecipe, settings: MeasureSettings = MeasureSettings(),
                 *, reference_config: Mapping[str, Any] | None = None) -> None:
        self.kernel_path, self.recipe, self.settings = str(Path(kernel_path).resolve()), recipe, settings
        self.reference_config = Config(reference_config) if reference_config is not None else None
        self.best_ms: float | None = None  # early stopping compares against this (callers may lower it)
        self.environment: dict[str, str] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="egg-tune-"))
        self._started: Started | None = None
        self._starts = 0
        self._last_log = ""  # the log of the last worker that ended
        self._replies: queue.Queue = queue.Queue(MAX_QUEUED_REPLIES)
        self._deaths = 0

    # the worker's life -------------------------------------------------------------------------------------------

    def start(self) -> dict[str, str]:
        """Start the worker and set the kernel up (idempotent). Returns the worker's environment description."""
        if self._process is not None and self._process.poll() is None:
            return self.environment
        from pipeline.judge import launcher

        self._replies = queue.Queue(MAX_QUEUED_REPLIES)
        # in the judge's sandbox: the worker imports the kernel file, user code; each start in a fresh folder (a
        # worker that died may have left anything in its own)
        self._starts += 1
        folder = self._dir / f"worker-{self._starts}"
        folder.mkdir()
        self._started = launcher.start("pipeline.tuning.worker", workdir=folder, read_only=(self.kernel_path,), device=self.settings.device)
        threading.Thread(target=_forward, args=(self._process, self._replies), daemon=True).start()
        reference = dict(self.reference_config) if self.reference_config is not None else None
        self._send({"op": "setup", "kernel_path": self.kernel_path, "recipe": self.recipe.to_json(),
                    "settings": asdict(self.settings), "reference_config": reference})
        reply = self._receive(self.settings.setup_timeout_s) or {"message": "the worker did not answer the setup in time"}
        if reply.get("event") != "ready":
            message = reply.get("message", "the worker died during the setup")
            self._stop()
            raise MeasureError(f"cannot set up {self.kernel_path}: {message}\n{self.log_tail()}")
        environment = reply.get("environment")
        self.environment = {str(k): str(v) for k, v in environment.items()} if isinstance(environment, dict) else {}
        return self.environment

    @property
    def _process(self) -> Any:
        """The running worker's process (the launcher's `Started.process`), or None."""
        return self._started.process if self._started is not None else None

    def _send(self, message: dict[str, Any]) -> None:
        self._process.stdin.write((json.dumps(message) + "\n").encode())
        self._process.stdin.flush()

    def _receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The worker's next reply; {"event": "died"} when its output ended; None when `timeout_s` passed."""
        try:
            return self._replies.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def _stop(self) -> None:
        if self._started is not None:
            self._last_log = self._started.log_tail(LOG_TAIL_CHARS)
            self._started.close()
        self._started = None

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> BatchMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_tail(self) -> str:
        """The end of the running worker's log (kept by the launcher, out of the worker's reach), else the last one's."""
        return self._started.log_tail(LOG_TAIL_CHARS) if self._started is not None else self._last_log

    # measuring ---------------------------------------------------------------------------------------------------

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        """Check and time each configuration, in order; a failing one is an outcome, not an exception."""
        return [self._measure_one(config) for config in configs]

    def _measure_one(self, config: Config) -> Measurement:
        if self._deaths > self.settings.max_worker_deaths:
            return Measurement(config, TuneStatus.RUNTIME_ERROR, detail=f"not measured: the worker died {self._deaths} times")
        request = {"op": "measure", "config": dict(config), "best_ms": self.best_ms}
        self.start()
        try:
            self._send(request)
        except OSError:  # the worker went away between configurations: not this one's fault, start afresh
            self._stop()
            self.start()
            self._send(request)
        reply = self._receive(self.settings.setup_timeout_s)
        if reply is not None and reply.get("event") == "started":
            reply = self._receive(self.settings.config_timeout_s)
        if reply is None or reply.get("event") != "result":
            return self._lost(config, timed_out=reply is None)
        measurement = _from_reply(config, reply)
        if measurement.ok:
            self.best_ms = measurement.time_ms if self.best_ms is None else min(self.best_ms, measurement.time_ms)
        return measurement

    def _lost(self, config: Config, *, timed_out: bool) -> Measurement:
        """The worker hung (killed here) or died on this configuration: say which, and start afresh next time."""
        returncode = None
        if not timed_out:
            try:
                returncode = self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._stop()
        if timed_out:
            return Measurement(config, TuneStatus.TIMEOUT, detail=f"no result within {self.settings.config_timeout_s:g} s")
        self._deaths += 1
        return Measurement(config, TuneStatus.RUNTIME_ERROR, detail=f"the worker died (exit code {returncode})\n{self.log_tail()[-1000:]}")


MAX_REPLY_BYTES = 1 << 20  # a line longer than this is not one of the worker's replies
MAX_QUEUED_REPLIES = 16  # the parent asks for one reply at a time (two per configuration): more is a flood


def _forward(process: Any, replies: queue.Queue) -> None:
    """Pass one worker's replies to its queue; "died" when its output ends. The worker runs the kernel file's
    code, which can write to its stdout too: a line that is not a reply (not JSON, not an object, too long) ends
    the worker's turn as a death with that story, never an exception here."""
    from pipeline.judge.launcher import job_json

    try:
        while line := process.stdout.readline(MAX_REPLY_BYTES + 1):
            reply = job_json(line) if len(line) <= MAX_REPLY_BYTES else None
            if not isinstance(reply, dict):
                raise ValueError("not a reply")
            replies.put_nowait(reply)  # more replies than the parent asked for (a flood): queue.Full
    except Exception:  # anything the kernel's code wrote there (deep nesting, NaN, garbage, a flood): its turn ends
        try:
            os.killpg(process.pid, 9)
        except OSError:
            pass
        replies.put({"event": "died", "message": "the worker wrote something that is not a reply on its channel"})
        return
    replies.put({"event": "died"})


def _from_reply(config: Config, reply: dict[str, Any]) -> Measurement:
    """A result reply as a measurement; one that does not read as a result is a runtime error with that story.
    (The kernel's code shares the worker's process: a time it forges can mislead the choice of a configuration,
    never a verdict, which the judge gives the tuned kernel in a process of its own.)"""
    try:
        detail = str(reply.get("detail", ""))[:4000]
        facts = [f"{k}={int(reply[k])}" for k in ("registers", "spills", "shared_bytes") if k in reply]
        if facts:
            detail = (detail + "; " if detail else "") + ", ".join(facts)
        time_ms = reply.get("time_ms")
        time_ms = None if time_ms is None else float(time_ms)
        if time_ms is not None and not (math.isfinite(time_ms) and time_ms >= 0):
            raise ValueError("not a time")
        return Measurement(config, TuneStatus(reply["status"]), time_ms, detail, int(reply.get("trials", 0)))
    except Exception:
        return Measurement(config, TuneStatus.RUNTIME_ERROR, detail="the worker's result could not be read")
