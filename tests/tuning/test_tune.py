"""tune(): space -> prune -> strategy with measurement -> cache -> rewrite, with scripted layers and real ones."""

from __future__ import annotations

import math
from pathlib import Path

from pipeline.tuning.cache import TuningCache
from pipeline.tuning.measure import MeasureSettings
from pipeline.tuning.measurement import TuneStatus
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec
from pipeline.tuning.scripted import ScriptedEvaluator
from pipeline.tuning.space import Config, Constraint, IntRange, PowerOfTwo, Space
from pipeline.tuning.strategy import Budget, Effort
from pipeline.tuning.tune import Layers, TuneRequest, describe, tune

from tests.tuning.test_prune import TileCompiler, matmul_recipe

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "candidates" / "matmul_triton.py"
SPACE = Space(
    (PowerOfTwo("BLOCK_M", 16, 128), PowerOfTwo("BLOCK_N", 16, 128), PowerOfTwo("BLOCK_K", 16, 64),
     PowerOfTwo("num_warps", 2, 8), IntRange("num_stages", 2, 4)),
    (Constraint.expr("accumulator", "BLOCK_M * BLOCK_N <= 128 * 32 * num_warps"),),
    default=Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3),
)


def gemm_cost(config: Config) -> float:
    tiles = math.ceil(256 / config["BLOCK_M"]) * math.ceil(256 / config["BLOCK_N"])
    return 0.01 * math.ceil(tiles / 16) * (1 + 16 / config["BLOCK_K"]) * (1 + abs(config["num_warps"] - 4) / 8) * (1 + abs(config["num_stages"] - 3) / 10)


def exhaustive_best(space: Space) -> float:
    return min(gemm_cost(c) for c in space.configs())


def test_tune_finds_a_near_best_config_rewrites_the_source_and_caches_every_outcome(tmp_path):
    device = ScriptedEvaluator(gemm_cost)
    request = TuneRequest(str(MATMUL), matmul_recipe(256), SPACE, effort=Effort.quick, strategy="pattern", budget=Budget(max_evals=100))
    with TuningCache(tmp_path / "tuning.sqlite") as cache:
        layers = Layers(evaluator=device, compiler=TileCompiler(), compile_workers=0, cache=cache)
        first = tune(request, layers)
        second = tune(request, layers)
    assert first.best.time_ms <= 1.03 * exhaustive_best(SPACE)
    assert first.stop_reason == "converged" and 0 < first.evaluations < 100
    assert first.evaluations == sum(device.calls.values()) and max(device.calls.values()) == 1
    # The same search again: every outcome comes from the cache, none from the device.
    assert second.evaluations == 0 and second.cache_hits == len(first.history)
    assert second.best.config == first.best.config and second.best.time_ms == first.best.time_ms
    changed = {k: v for k, v in first.best.config.items() if SPACE.default[k] != v}
    assert changed  # the file's own 64x64x32 tiles are not the best for this landscape
    for name, value in changed.items():  # tiles are baked where the launcher assigns them, options at the launch
        assert (f"{name}={value}" if name.startswith("num_") else f"block_{name[-1].lower()} = {value}") in first.source
    assert f"egg tuned matmul_kernel for launch {request.recipe.signature()}" in first.source
    summary = describe(first)
    assert summary["best_config"] == dict(first.best.config) and sum(summary["statuses"].values()) == len(first.history)


def test_every_strategy_runs_through_tune_and_pruning_spares_the_device():
    results = {}
    for strategy in ("exhaustive", "random", "pattern", "surrogate"):
        device = ScriptedEvaluator(gemm_cost)
        request = TuneRequest(str(MATMUL), matmul_recipe(256), SPACE, strategy=strategy, budget=Budget(max_evals=SPACE.size()))
        results[strategy] = tune(request, Layers(evaluator=device, compiler=TileCompiler(), compile_workers=0))
        assert results[strategy].evaluations == len(device.calls)
    exhaustive = results["exhaustive"]
    pruned = [t for t in exhaustive.history if not t.measured]
    assert pruned and all(t.status in (TuneStatus.SPILLS, TuneStatus.DUPLICATE_BINARY, TuneStatus.SHARED_OVERFLOW) for t in pruned)
    assert exhaustive.evaluations == SPACE.size() - len(pruned)
    for strategy in ("pattern", "surrogate"):
        assert results[strategy].best.time_ms <= 1.03 * exhaustive.best.time_ms
        assert results[strategy].evaluations <= exhaustive.evaluations / 4


def test_tune_on_the_cpu_checks_configs_with_the_real_worker_but_times_none():
    recipe = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((6, 24)), "out_ptr": TensorSpec((6,), output=True), "n_cols": 24}, grid="(6,)")
    space = Space((PowerOfTwo("BLOCK", 8, 64),), default=Config(BLOCK=32))
    request = TuneRequest(str(ROOT / "tests" / "fixtures" / "search" / "row_sum.py"), recipe, space, strategy="exhaustive",
                          settings=MeasureSettings(device="cpu", setup_timeout_s=60, config_timeout_s=60))
    result = tune(request, Layers(prune=False))
    assert [(t.config["BLOCK"], t.status.value) for t in result.history] == [(8, "mismatch"), (16, "mismatch"), (32, "ok"), (64, "ok")]
    assert result.best is None and result.source is None
    assert result.rewrite_error == "no configuration both ran correctly and was timed"
    assert result.environment["device"] == "cpu"
