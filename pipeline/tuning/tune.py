"""Tuning one kernel launch: space -> pruning -> strategy with batched measurement -> cache -> rewrite.

    result = tune(TuneRequest(kernel_path, recipe, space, effort=Effort.quick))
    result.best.config, result.best.time_ms, result.source  # the file with the winner baked in

The layers are evaluators wrapped around each other: the cache answers what it knows, the pruner compiles the rest
on CPU cores and drops what cannot win, and the batch measurer checks and times what is left on the device. The
strategy sees one evaluator and a budget. Hardware sub-stages and the expert backend call `tune`; tests pass a
scripted evaluator and compiler and run the same code.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.tuning.cache import CachedEvaluator, CacheScope, TuningCache
from pipeline.tuning.measure import BatchMeasurer, MeasureSettings
from pipeline.tuning.measurement import Evaluator, Measurement
from pipeline.tuning.prune import Compiler, PrunedEvaluator, Sm90Compiler
from pipeline.tuning.recipe import LaunchRecipe
from pipeline.tuning.rewrite import RewriteError, bake_config
from pipeline.tuning.space import Config, Space, SpaceError
from pipeline.tuning.strategy import Budget, Effort, make_strategy


@dataclass(frozen=True)
class TuneRequest:
    """What to tune: a kernel file, how to launch it, the space, and how hard to search."""

    kernel_path: str
    recipe: LaunchRecipe
    space: Space
    effort: Effort = Effort.quick
    strategy: str | None = None  # None: the effort's strategy
    budget: Budget | None = None  # None: the effort's share of the space
    settings: MeasureSettings | None = None  # None: the device's defaults with the effort's warmup and trials
    seed: int = 0

    def measure_settings(self) -> MeasureSettings:
        return self.settings or MeasureSettings(warmup=self.effort.warmup, trials=self.effort.trials)


@dataclass(frozen=True)
class TuneResult:
    """The outcome of tuning: the best configuration, what it cost, every outcome, and the rewritten source."""

    kernel_path: str
    strategy: str
    best: Measurement | None
    evaluations: int  # configurations measured on the device
    cache_hits: int
    wall_s: float
    stop_reason: str
    history: tuple[Measurement, ...]
    source: str | None  # the kernel file with the best configuration baked in (None: no winner, or not bakeable)
    rewrite_error: str = ""
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def best_config(self) -> Config | None:
        return self.best.config if self.best is not None else None

    @property
    def best_time_ms(self) -> float | None:
        return self.best.time_ms if self.best is not None else None


@dataclass(frozen=True)
class Layers:
    """Optional replacements for the real layers (tests, or a caller that holds its own)."""

    evaluator: Evaluator | None = None  # None: a BatchMeasurer on the device
    compiler: Compiler | None = None  # None with prune=True: Sm90Compiler
    prune: bool = True
    compile_workers: int = 2
    cache: TuningCache | None = None  # None: no caching


def tune(request: TuneRequest, layers: Layers = Layers()) -> TuneResult:
    """Search the request's space and return the best configuration with the kernel source rewritten for it."""
    start = time.monotonic()
    source = Path(request.kernel_path).read_text()
    with ExitStack() as stack:
        evaluator, environment = _device_evaluator(request, layers, stack)
        if layers.prune:
            compiler = layers.compiler or Sm90Compiler(str(Path(request.kernel_path).resolve()), request.recipe)
            evaluator = stack.enter_context(PrunedEvaluator(evaluator, compiler, workers=layers.compile_workers))
        cached = None
        if layers.cache is not None:
            evaluator = cached = CachedEvaluator(evaluator, layers.cache, CacheScope.of(source, request.recipe.signature(), environment))
        budget = request.budget or request.effort.budget(_size(request.space))
        strategy = make_strategy(request.strategy or request.effort.strategy, seed=request.seed)
        search = strategy.run(request.space, evaluator, budget)
    baked, error = _rewrite(source, request, search.best)
    return TuneResult(
        request.kernel_path, search.strategy, search.best, search.evaluations, cached.hits if cached else 0,
        time.monotonic() - start, search.stop_reason, search.trials, baked, error, environment,
    )


def _size(space: Space) -> int:
    try:
        return space.size()
    except SpaceError:  # too large to list: the effort's cap on evaluations applies
        return space.unconstrained_size


def _device_evaluator(request: TuneRequest, layers: Layers, stack: ExitStack) -> tuple[Evaluator, dict[str, str]]:
    if layers.evaluator is not None:
        return layers.evaluator, {"evaluator": type(layers.evaluator).__name__}
    measurer = stack.enter_context(BatchMeasurer(request.kernel_path, request.recipe, request.measure_settings(),
                                                 reference_config=request.space.default))
    return measurer, measurer.start()


def _rewrite(source: str, request: TuneRequest, best: Measurement | None) -> tuple[str | None, str]:
    if best is None:
        return None, "no configuration both ran correctly and was timed"
    note = f"egg tuned {request.recipe.kernel} for launch {request.recipe.signature()}: {dict(best.config)}"
    try:
        return bake_config(source, request.recipe.kernel, best.config, current=request.space.default, note=note), ""
    except RewriteError as exc:
        return None, str(exc)


def describe(result: TuneResult) -> dict[str, Any]:
    """A JSON-ready summary of a result (the history's outcomes by status, the best)."""
    statuses: dict[str, int] = {}
    for m in result.history:
        statuses[m.status.value] = statuses.get(m.status.value, 0) + 1
    return {
        "strategy": result.strategy,
        "best_config": dict(result.best_config) if result.best_config else None,
        "best_time_ms": result.best_time_ms,
        "evaluations": result.evaluations,
        "cache_hits": result.cache_hits,
        "wall_s": round(result.wall_s, 3),
        "stop_reason": result.stop_reason,
        "statuses": statuses,
        "rewrite_error": result.rewrite_error,
    }
