"""Search strategies: one base class, one method (`propose`), chosen by name.

`Strategy.run(space, evaluator, budget)` is the one loop: ask the strategy for a batch, drop configurations already
measured (a configuration is never measured twice), cut the batch to the budget, measure it as one batch, repeat
until the strategy has nothing more to propose or the budget (evaluations, seconds) is spent. Evaluations count
configurations that cost device time; cached and compile-pruned outcomes are free.

Strategies: "exhaustive" (the reference), "random", "pattern" (best-first coordinate search from the current config:
halving/doubling powers of two, runner-up centres, restarts from far points when stalled), and "surrogate" (pattern
search assisted by a Gaussian process: see `pipeline.tuning.surrogate`).
"""

from __future__ import annotations

import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from pipeline.tuning.measurement import Evaluator, Measurement
from pipeline.tuning.space import Config, Space


@dataclass(frozen=True)
class Budget:
    """Limits on one search: configurations measured on the device, and wall-clock seconds."""

    max_evals: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_evals is not None and self.max_evals < 1:
            raise ValueError(f"max_evals must be at least 1, got {self.max_evals}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be positive, got {self.max_seconds}")


@dataclass(frozen=True)
class Effort:
    """A preset: which strategy, how much of the space it may measure, and how hard each measurement is."""

    name: str
    strategy: str
    eval_fraction: float  # of the space's valid configurations
    min_evals: int
    max_evals: int
    max_seconds: float
    warmup: int  # per configuration, on the device
    trials: int

    quick: ClassVar[Effort]
    full: ClassVar[Effort]

    def budget(self, space_size: int) -> Budget:
        evals = min(self.max_evals, max(self.min_evals, math.ceil(self.eval_fraction * space_size)))
        return Budget(max_evals=max(1, evals), max_seconds=self.max_seconds)

    @classmethod
    def named(cls, name: str) -> Effort:
        presets = {"quick": cls.quick, "full": cls.full}
        if name not in presets:
            raise ValueError(f"unknown effort {name!r}; choose one of {sorted(presets)}")
        return presets[name]


Effort.quick = Effort("quick", "surrogate", eval_fraction=0.15, min_evals=8, max_evals=40, max_seconds=120.0, warmup=2, trials=10)
Effort.full = Effort("full", "surrogate", eval_fraction=0.25, min_evals=16, max_evals=400, max_seconds=900.0, warmup=3, trials=50)


@dataclass(frozen=True)
class History:
    """What a strategy sees: the space and every outcome so far, in order."""

    space: Space
    trials: tuple[Measurement, ...] = ()

    @cached_property
    def _keys(self) -> frozenset[str]:
        return frozenset(t.config.key for t in self.trials)

    def seen(self, config: Config) -> bool:
        return config.key in self._keys

    @property
    def best(self) -> Measurement | None:
        """The configuration with the lowest finite score, if any."""
        finite = [t for t in self.trials if math.isfinite(t.score)]
        return min(finite, key=lambda t: t.score) if finite else None

    @property
    def evaluations(self) -> int:
        return sum(t.measured for t in self.trials)


@dataclass(frozen=True)
class SearchResult:
    """The outcome of one search: the best configuration found, every outcome, and what it cost."""

    strategy: str
    best: Measurement | None
    trials: tuple[Measurement, ...]
    evaluations: int  # configurations that cost device time
    wall_s: float
    stop_reason: str  # "converged" (nothing left to propose), "max_evals" or "max_seconds"


STRATEGIES: dict[str, type[Strategy]] = {}


class Strategy(ABC):
    """A search strategy. Subclasses implement `propose`; `run` is the loop they all share."""

    name: ClassVar[str]

    def __init__(self, *, seed: int = 0, batch_size: int = 8) -> None:
        self.rng = random.Random(seed)
        self.batch_size = batch_size

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            STRATEGIES[cls.name] = cls

    @abstractmethod
    def propose(self, history: History) -> list[Config]:
        """The next configurations to measure (unseen, valid); an empty list ends the search."""

    def run(self, space: Space, evaluator: Evaluator, budget: Budget = Budget(), *, clock: Callable[[], float] = time.monotonic) -> SearchResult:
        """Search `space` with `evaluator` until the strategy stops or `budget` is spent."""
        start = clock()
        history = History(space)
        stop = "converged"
        while True:
            if budget.max_seconds is not None and clock() - start >= budget.max_seconds:
                stop = "max_seconds"
                break
            left = None if budget.max_evals is None else budget.max_evals - history.evaluations
            if left is not None and left <= 0:
                stop = "max_evals"
                break
            batch = _admissible(self.propose(history), history)[:left]
            if not batch:
                break
            results = evaluator.evaluate(batch)
            if [r.config for r in results] != batch:
                raise RuntimeError(f"{type(evaluator).__name__}.evaluate returned outcomes for other configurations")
            history = History(space, history.trials + tuple(results))
        return SearchResult(self.name, history.best, history.trials, history.evaluations, clock() - start, stop)


def _admissible(proposal: Sequence[Config], history: History) -> list[Config]:
    """The proposal without repeats, configurations already measured, or configurations outside the space."""
    batch: dict[str, Config] = {}
    for config in proposal:
        config = Config(config)
        if config.key not in batch and not history.seen(config) and history.space.is_valid(config):
            batch[config.key] = config
    return list(batch.values())


def make_strategy(name: str, **options: Any) -> Strategy:
    """A fresh strategy by registry name (a strategy object serves one search)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[name](**options)


# The strategies ---------------------------------------------------------------------------------------------------


class Exhaustive(Strategy):
    """Every valid configuration, in the space's order: the reference the others are judged against."""

    name = "exhaustive"

    def __init__(self, *, seed: int = 0, batch_size: int = 32) -> None:
        super().__init__(seed=seed, batch_size=batch_size)
        self._pending: Iterator[Config] | None = None

    def propose(self, history: History) -> list[Config]:
        if self._pending is None:
            self._pending = history.space.configs()
        batch = []
        for config in self._pending:
            if not history.seen(config):
                batch.append(config)
                if len(batch) == self.batch_size:
                    break
        return batch


class RandomSearch(Strategy):
    """Distinct valid configurations drawn uniformly at random."""

    name = "random"

    def propose(self, history: History) -> list[Config]:
        return history.space.sample(self.rng, self.batch_size, exclude=history.seen)


class PatternSearch(Strategy):
    """Best-first coordinate search on the lattice (Hooke-Jeeves moves), from the kernel's current config.

    The centre is the best configuration of the current descent whose neighbourhood is not yet polled. Its
    neighbours are tried one parameter at a time (powers of two halve and double); a move that improves makes the
    new config the centre and is repeated in the same direction. When every neighbour of a centre is measured, the
    next best configuration of the descent becomes the centre, as long as it is within `breadth` of the descent's
    best: measurements are noisy and good tiles often sit on narrow ridges, so a runner-up's neighbourhood is where
    the next improvement most often is. When no such configuration is left, moves of two steps are tried from the
    best, then the descent restarts from a configuration far from everything measured (`max_restarts` times;
    None: until the budget ends).
    """

    name = "pattern"

    def __init__(self, *, seed: int = 0, batch_size: int = 8, max_distance: int = 2, max_restarts: int | None = 2,
                 breadth: float = 0.05, patience: int | None = None, min_improvement: float = 0.002) -> None:
        super().__init__(seed=seed, batch_size=batch_size)
        self.patience, self.min_improvement = patience, min_improvement
        self.max_distance, self.max_restarts, self.breadth = max_distance, max_restarts, breadth
        self.local: set[str] = set()  # keys measured by the current descent
        self.polled: set[str] = set()  # centres whose every neighbour is measured
        self.center: Config | None = None
        self.direction: tuple[str, int] | None = None  # the parameter and sign of the last improving move
        self.next_param = 0
        self.restarts = 0
        self.started_at = 0  # trials before the current descent began

    def propose(self, history: History) -> list[Config]:
        if not self.local:
            return self._start(history, start_point(history, self.rng))
        patience = self.patience or 4 * len(history.space.params)
        stalled = min(_since_improvement(history.trials, self.min_improvement), len(history.trials) - self.started_at) >= patience
        while not stalled and (center := self._next_center(history)) is not None:
            self._follow(center, history.space)
            proposal = self._line_move(history) or self._coordinate_moves(history)
            if proposal:
                self.local.update(c.key for c in proposal)
                return proposal
            self.polled.add(center.key)
        proposal = [] if stalled else self._wide_moves(history)
        if proposal:
            self.local.update(c.key for c in proposal)
            return proposal
        if self.max_restarts is not None and self.restarts >= self.max_restarts:
            return []
        self.restarts += 1
        return self._start(history, _far_point(history, self.rng))

    def adopt(self, configs: Sequence[Config]) -> None:
        """Configurations measured alongside the descent (another strategy's picks) join it: a good one becomes a
        centre."""
        self.local.update(Config(c).key for c in configs)

    def _descent(self, history: History) -> list[Measurement]:
        return sorted((t for t in history.trials if t.config.key in self.local and math.isfinite(t.score)), key=lambda t: t.score)

    def _next_center(self, history: History) -> Config | None:
        """The best configuration of this descent not yet polled, within `breadth` of the descent's best."""
        descent = self._descent(history)
        for trial in descent:
            if trial.score > descent[0].score * (1 + self.breadth):
                return None
            if trial.config.key not in self.polled:
                return trial.config
        return None

    def _follow(self, center: Config, space: Space) -> None:
        """Move to `center`; remember the direction when it is one improving step from the previous centre."""
        if self.center is not None and center != self.center:
            changed = [n for n in space.names if center[n] != self.center[n]]
            ordered = len(changed) == 1 and isinstance(center[changed[0]], (int, float)) and not isinstance(center[changed[0]], bool)
            self.direction = (changed[0], 1 if center[changed[0]] > self.center[changed[0]] else -1) if ordered else None
        elif self.center is not None:
            self.direction = None
        self.center = center

    def _line_move(self, history: History) -> list[Config]:
        if self.direction is None:
            return []
        name, sign = self.direction
        self.direction = None  # tried once per move
        value = history.space.param(name).step(self.center[name], sign)
        if value is None:
            return []
        config = self.center.replace(**{name: value})
        return [config] if history.space.is_valid(config) and not history.seen(config) else []

    def _coordinate_moves(self, history: History) -> list[Config]:
        space = history.space
        for _ in range(len(space.params)):
            name = space.names[self.next_param]
            self.next_param = (self.next_param + 1) % len(space.params)
            moves = [c for c in space.neighbours(self.center) if c[name] != self.center[name] and not history.seen(c)]
            if moves:
                return moves
        return []

    def _wide_moves(self, history: History) -> list[Config]:
        descent = self._descent(history)
        if not descent:
            return []
        for distance in range(2, self.max_distance + 1):
            moves = [c for c in history.space.neighbours(descent[0].config, distance) if not history.seen(c)]
            if moves:
                return moves
        return []

    def _start(self, history: History, config: Config | None) -> list[Config]:
        if config is None:
            return []
        self.local, self.center, self.direction = {config.key}, None, None
        self.started_at = len(history.trials)
        return [config]


def _since_improvement(trials: Sequence[Measurement], min_improvement: float) -> int:
    """Measurements since the best score last improved by more than `min_improvement` (relative)."""
    best, last = math.inf, 0
    for index, trial in enumerate(trials):
        if trial.score < best * (1 - min_improvement):
            last = index
        best = min(best, trial.score)
    return len(trials) - 1 - last


def start_point(history: History, rng: random.Random) -> Config | None:
    default = history.space.default
    if default is not None and not history.seen(default):
        return default
    found = history.space.sample(rng, 1, exclude=history.seen)
    return found[0] if found else None


def _far_point(history: History, rng: random.Random, pool_size: int = 64) -> Config | None:
    """An unmeasured configuration far from every measured one (the best of a random pool, by maximin)."""
    pool = history.space.sample(rng, pool_size, exclude=history.seen)
    if not pool or not history.trials:
        return pool[0] if pool else None
    seen = np.array([history.space.coordinates(t.config) for t in history.trials])
    points = np.array([history.space.coordinates(c) for c in pool])
    nearest = np.sqrt(((points[:, None, :] - seen[None, :, :]) ** 2).sum(-1)).min(axis=1)
    return pool[int(nearest.argmax())]


# Registered on import; it lives in its own module (the Gaussian process is its own idea).
from pipeline.tuning import surrogate  # noqa: E402,F401
