"""Replaying recorded measurements: a search as it would have gone on the device that measured the table.

A `RecordedTable` is one kernel's exhaustive search as the H200 bench writes it (`bench/tune_h200.py`: every
configuration of the space with its outcome). `replay_evaluator(table)` answers any configuration from that table
through the same pruning layer the bench uses (`PrunedEvaluator`): a configuration that failed to compile, spilled
or overflowed shared memory is answered free, as on the device; configurations that compiled to one binary form a
group, and only the first of a group a search asks for costs a device evaluation (the others are
`duplicate_binary`). Times carry seeded multiplicative noise (0.7% by default: 87 GEMM configurations measured twice in the H200
run differed by 0.96% (sd of the log ratio), so one measurement by about 0.7%), and a
configuration `too_slow_factor` times slower than the best so far is `too_slow`, as the measurement worker says.

So strategies can be compared over many seeds on real landscapes, on a CPU, in seconds. Nothing here is a new
measurement: every time comes from the recorded table.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.prune import BinaryFacts, PrunedEvaluator
from pipeline.tuning.space import Config, Space
from pipeline.tuning.strategy import Budget, make_strategy

_PRUNED_BY_COMPILER = (TuneStatus.COMPILE_ERROR, TuneStatus.SPILLS, TuneStatus.SHARED_OVERFLOW)


@dataclass(frozen=True)
class RecordedTable:
    """One kernel's exhaustive outcomes: config key -> (status, time in ms, the key of its binary group)."""

    kernel: str
    space: Space
    status: Mapping[str, TuneStatus]
    time_ms: Mapping[str, float | None]  # a duplicate's time is its group's; too_slow's is a lower bound
    group: Mapping[str, str]  # config key -> the key of the configuration measured for its binary

    @classmethod
    def from_report(cls, kernel: Mapping[str, Any]) -> RecordedTable:
        """From one kernel of tune_h200.json (its exhaustive run), or of a fixture with the same fields."""
        runs = [r for r in kernel["runs"] if r["strategy"] == "exhaustive"]
        if not runs:
            raise ValueError(f"{kernel['kernel']}: no exhaustive run to replay")
        status, time_ms, group = {}, {}, {}
        for row in runs[0]["history"]:
            m = Measurement.from_json(row)
            status[m.config.key], time_ms[m.config.key] = m.status, m.time_ms
            group[m.config.key] = m.twin if m.status is TuneStatus.DUPLICATE_BINARY and m.twin else m.config.key
        space = Space.from_spec(kernel["space"])
        missing = [c.key for c in space.configs() if c.key not in status]
        if missing:
            raise ValueError(f"{kernel['kernel']}: the table lacks {len(missing)} configs of its space, e.g. {missing[0]}")
        return cls(kernel["kernel"], space, status, time_ms, group)

    @property
    def best_ms(self) -> float:
        return min(t for k, t in self.time_ms.items() if t is not None and self.status[k] is TuneStatus.OK)

    @property
    def device_evaluations(self) -> int:
        """What exhaustive search cost on the device: one evaluation per binary group that reached it."""
        return len({self.group[k] for k, s in self.status.items() if s not in _PRUNED_BY_COMPILER})

    def ratio(self, config: Config) -> float:
        """The config's recorded time over the best recorded time (inf for a failed config)."""
        key = Config(config).key
        time_ms = self.time_ms[key] if self.status[key] not in _PRUNED_BY_COMPILER else None
        return time_ms / self.best_ms if time_ms else math.inf


def load_tables(path: str | Path) -> dict[str, RecordedTable]:
    """Every kernel of a tune_h200.json (or a fixture of the same shape) that has an exhaustive run."""
    report = json.loads(Path(path).read_text())
    return {k["kernel"]: RecordedTable.from_report(k) for k in report["kernels"] if any(r.get("strategy") == "exhaustive" for r in k["runs"])}


@dataclass(frozen=True)
class TableCompiler:
    """The pruner's compiler, answered from the table: what compiling told the bench when it recorded it."""

    table: RecordedTable

    def compile(self, config: Config) -> BinaryFacts:
        status = self.table.status[config.key]
        if status is TuneStatus.COMPILE_ERROR:
            raise RuntimeError("compile error (recorded)")
        spilled = 1 if status is TuneStatus.SPILLS else 0
        shared = 1 << 30 if status is TuneStatus.SHARED_OVERFLOW else 0
        return BinaryFacts(registers=255, spilled_bytes=spilled, shared_bytes=shared, launch_sha256=self.table.group[config.key])


class TableDevice:
    """The device, answered from the table: recorded time x (1 + noise x N(0, 1)), counted per configuration."""

    def __init__(self, table: RecordedTable, *, noise: float = 0.007, seed: int = 0, too_slow_factor: float = 1.5) -> None:
        self.table, self.noise, self.too_slow_factor = table, noise, too_slow_factor
        self.rng = random.Random(seed)
        self.calls: Counter[str] = Counter()
        self.best_ms = math.inf

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        return [self._measure(c) for c in configs]

    def _measure(self, config: Config) -> Measurement:
        self.calls[config.key] += 1
        key = self.table.group[config.key]
        recorded = self.table.time_ms[key]
        if recorded is None:
            return Measurement(config, self.table.status[key], detail="recorded failure")
        time_ms = recorded * (1.0 + self.noise * self.rng.gauss(0.0, 1.0))
        if time_ms > self.too_slow_factor * self.best_ms:
            return Measurement(config, TuneStatus.TOO_SLOW, time_ms, detail="recorded time, slower than the best so far", trials=3)
        self.best_ms = min(self.best_ms, time_ms)
        return Measurement(config, TuneStatus.OK, time_ms, detail="recorded time", trials=20)


def replay_evaluator(table: RecordedTable, *, noise: float = 0.007, seed: int = 0) -> tuple[PrunedEvaluator, TableDevice]:
    """The bench's evaluator stack over the table: pruning and duplicate binaries free, the rest from the device."""
    device = TableDevice(table, noise=noise, seed=seed)
    return PrunedEvaluator(device, TableCompiler(table), workers=0), device


@dataclass(frozen=True)
class ReplayRun:
    """One replayed search: what it found (its recorded ratio to the best) and what it cost."""

    strategy: str
    seed: int
    best: Config | None
    ratio: float
    evaluations: int
    budget: int

    @property
    def meets_target(self) -> bool:
        """Issue 5's target: within 3% of the exhaustive best with at most a quarter of its device evaluations."""
        return self.ratio <= 1.03 and self.evaluations <= self.budget


def quarter_budget(table: RecordedTable) -> int:
    """The bench's budget for a searcher: a quarter of exhaustive's device evaluations."""
    return max(1, table.device_evaluations // 4)


def replay(table: RecordedTable, strategy: str, seed: int, *, noise: float = 0.007, budget: int | None = None) -> ReplayRun:
    """Run `strategy` (seeded) against the table with the bench's budget; the noise is seeded the same."""
    evals = quarter_budget(table) if budget is None else budget
    evaluator, device = replay_evaluator(table, noise=noise, seed=seed)
    result = make_strategy(strategy, seed=seed).run(table.space, evaluator, Budget(max_evals=evals))
    if max(device.calls.values(), default=0) > 1:
        raise RuntimeError(f"{strategy} measured a configuration twice")
    ratio = table.ratio(result.best.config) if result.best else math.inf
    return ReplayRun(strategy, seed, result.best.config if result.best else None, ratio, result.evaluations, evals)


@dataclass(frozen=True)
class ReplaySummary:
    """One strategy on one table over many seeds: how often it met the target, and its ratios and costs."""

    kernel: str
    strategy: str
    runs: tuple[ReplayRun, ...]

    @property
    def success_rate(self) -> float:
        return sum(r.meets_target for r in self.runs) / len(self.runs)

    @property
    def median_ratio(self) -> float:
        return statistics.median(r.ratio for r in self.runs)

    @property
    def worst_ratio(self) -> float:
        return max(r.ratio for r in self.runs)

    @property
    def median_evaluations(self) -> float:
        return statistics.median(r.evaluations for r in self.runs)


def replay_many(table: RecordedTable, strategy: str, seeds: int, *, noise: float = 0.007) -> ReplaySummary:
    """`strategy` replayed with seeds 0..seeds-1 (each seed drives the strategy and the noise)."""
    return ReplaySummary(table.kernel, strategy, tuple(replay(table, strategy, seed, noise=noise) for seed in range(seeds)))
