"""What measuring a configuration produces, and the one interface every measurer implements.

A failed configuration is data: it gets a status, never an exception. Standard library only.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.tuning.space import Config


class TuneStatus(str, enum.Enum):
    """How one configuration fared. Stable values: the cache and reports keep them."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    MISMATCH = "mismatch"  # ran, but changed the results: rejected, not timed
    TOO_SLOW = "too_slow"  # its first trials were far slower than the best so far: timing stopped early
    SPILLS = "spills"  # registers spill to local memory (found by compiling on the CPU)
    SHARED_OVERFLOW = "shared_overflow"  # needs more shared memory than a block may have
    DUPLICATE_BINARY = "duplicate_binary"  # compiles to the same binary as a configuration already measured
    TIMEOUT = "timeout"

    def __str__(self) -> str:
        return self.value


# Statuses that come from compiling alone (no device time spent).
PRUNED = (TuneStatus.SPILLS, TuneStatus.SHARED_OVERFLOW, TuneStatus.DUPLICATE_BINARY)


@dataclass(frozen=True)
class Measurement:
    """The outcome for one configuration.

    `time_ms` is the median device time for ok; a lower bound for too_slow; the twin's time for duplicate_binary;
    None when nothing was timed (a failure, or a CPU run where timing is skipped). `measured` is True when this
    outcome cost device time now (not from the cache, not decided by compiling alone): budgets count these.
    """

    config: Config
    status: TuneStatus
    time_ms: float | None = None
    detail: str = ""
    trials: int = 0
    measured: bool = True
    twin: str | None = None  # duplicate_binary: the key of the configuration with the same binary

    @property
    def score(self) -> float:
        """What a search minimizes: the time when there is one, else infinity."""
        if self.status in (TuneStatus.OK, TuneStatus.TOO_SLOW, TuneStatus.DUPLICATE_BINARY) and self.time_ms is not None:
            return self.time_ms
        return math.inf

    @property
    def ok(self) -> bool:
        return self.status is TuneStatus.OK and self.time_ms is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "status": self.status.value,
            "time_ms": self.time_ms,
            "detail": self.detail,
            "trials": self.trials,
            "measured": self.measured,
            "twin": self.twin,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        return cls(Config(data["config"]), TuneStatus(data["status"]), data.get("time_ms"), data.get("detail", ""),
                   data.get("trials", 0), data.get("measured", True), data.get("twin"))


class Evaluator(Protocol):
    """Measures a batch of configurations; returns one Measurement per config, in the same order."""

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]: ...
