"""A deterministic stand-in for the device: measures configurations by a cost function, for tests and demos.

Like tinygrad's null device, it lets the whole search (strategies, budgets, caching, pruning) run without a GPU.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.space import Config

# A cost function returns a time in ms, or a status for a configuration that fails.
Cost = Callable[[Config], "float | TuneStatus"]


class FakeClock:
    """A clock that only moves when told to; pass it to `Strategy.run(clock=...)` to test time budgets."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@dataclass
class ScriptedEvaluator:
    """Measures each config as `cost(config)`, times (1 + noise x N(0, 1)) from a seeded generator.

    Every measured configuration is counted in `calls` (so tests can check none is measured twice) and each batch
    is kept in `batches`; with a `clock`, every measurement advances it by `seconds_per_eval`.
    """

    cost: Cost
    noise: float = 0.0
    seed: int = 0
    clock: FakeClock | None = None
    seconds_per_eval: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.calls: Counter[str] = Counter()
        self.batches: list[list[Config]] = []

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        self.batches.append(list(configs))
        return [self._measure(c) for c in configs]

    def _measure(self, config: Config) -> Measurement:
        self.calls[config.key] += 1
        if self.clock is not None:
            self.clock.advance(self.seconds_per_eval)
        outcome = self.cost(config)
        if isinstance(outcome, TuneStatus):
            return Measurement(config, outcome, detail="scripted failure")
        time_ms = outcome * (1.0 + self.noise * self.rng.gauss(0.0, 1.0))
        return Measurement(config, TuneStatus.OK, time_ms, trials=1)

    @property
    def evaluations(self) -> int:
        return sum(self.calls.values())
