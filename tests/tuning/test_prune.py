"""Pruning before the device: compile errors, spills, shared-memory overflow and duplicate binaries cost no
device time. A scripted compiler drives the rules; the real sm_90 compiler prunes real configs of real kernels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.tuning.measurement import TuneStatus
from pipeline.tuning.prune import BinaryFacts, PrunedEvaluator, Sm90Compiler
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec
from pipeline.tuning.scripted import ScriptedEvaluator
from pipeline.tuning.space import Config, IntRange, PowerOfTwo, Space
from pipeline.tuning.strategy import Budget, make_strategy

ROOT = Path(__file__).resolve().parents[2]
K = 64  # the inner dimension: a BLOCK_K of 64 means no loop, so num_stages cannot change the binary


@dataclass(frozen=True)
class TileCompiler:
    """A scripted compiler for a GEMM-like kernel (module level, so a process pool can pickle it)."""

    def compile(self, config: Config) -> BinaryFacts:
        bm, bn, bk, warps, stages = (config[n] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))
        if bm == 256 and bn == 256:
            raise RuntimeError("ptxas fatal: too many resources")
        spilled = max(0, bm * bn // (32 * warps) - 128) * 4
        shared = (bm + bn) * bk * 8 * (stages if bk < K else 1)
        binary = f"{bm}-{bn}-{bk}-{warps}-{stages if bk < K else 'any'}"
        return BinaryFacts(min(255, 32 + bm * bn // (32 * warps)), spilled, shared, binary)


def cfg(bm, bn, bk, warps=4, stages=2) -> Config:
    return Config(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)


def test_each_pruning_rule_gives_its_status_without_device_time():
    device = ScriptedEvaluator(lambda c: 1.0)
    configs = [cfg(256, 256, 16), cfg(128, 128, 16, warps=2), cfg(256, 128, 32, warps=8, stages=4), cfg(64, 64, 32)]
    results = PrunedEvaluator(device, TileCompiler(), workers=0).evaluate(configs)
    assert [r.status for r in results] == [TuneStatus.COMPILE_ERROR, TuneStatus.SPILLS, TuneStatus.SHARED_OVERFLOW, TuneStatus.OK]
    assert [r.measured for r in results] == [False, False, False, True]
    assert "ptxas fatal" in results[0].detail and "spilled" in results[1].detail and "232448" in results[2].detail
    assert list(device.calls) == [cfg(64, 64, 32).key]


def test_duplicate_binaries_take_the_twins_outcome_within_and_across_batches():
    device = ScriptedEvaluator(lambda c: 2.0 + c["num_stages"])
    pruner = PrunedEvaluator(device, TileCompiler(), workers=0)
    first = pruner.evaluate([cfg(32, 32, 64, stages=2), cfg(32, 32, 64, stages=3), cfg(32, 32, 16, stages=3)])
    later = pruner.evaluate([cfg(32, 32, 64, stages=4)])
    assert [r.status for r in first] == [TuneStatus.OK, TuneStatus.DUPLICATE_BINARY, TuneStatus.OK]
    assert first[1].time_ms == first[0].time_ms == 4.0 and first[1].twin == cfg(32, 32, 64, stages=2).key
    assert later[0].status is TuneStatus.DUPLICATE_BINARY and later[0].time_ms == 4.0 and not later[0].measured
    assert len(device.calls) == 2


def test_a_search_through_the_pruner_spends_device_time_only_on_distinct_survivors():
    space = Space((PowerOfTwo("BLOCK_M", 32, 256), PowerOfTwo("BLOCK_N", 32, 256), PowerOfTwo("BLOCK_K", 16, 64),
                   PowerOfTwo("num_warps", 2, 8), IntRange("num_stages", 2, 4)))
    device = ScriptedEvaluator(lambda c: 1.0 + abs(c["BLOCK_M"] - 128) / 64 + abs(c["BLOCK_N"] - 64) / 64 + 4 / c["BLOCK_K"] + c["num_stages"] / 10)
    with PrunedEvaluator(device, TileCompiler(), workers=2) as pruner:  # the real process pool
        result = make_strategy("exhaustive").run(space, pruner, Budget())
    statuses = {s: sum(t.status is s for t in result.trials) for s in TuneStatus}
    assert statuses[TuneStatus.COMPILE_ERROR] == 3 * 3 * 3
    assert statuses[TuneStatus.SPILLS] > 0 and statuses[TuneStatus.SHARED_OVERFLOW] > 0 and statuses[TuneStatus.DUPLICATE_BINARY] > 0
    assert result.evaluations == len(device.calls) == statuses[TuneStatus.OK]
    assert max(device.calls.values()) == 1
    assert result.best.config["BLOCK_K"] == 64 and result.best.status in (TuneStatus.OK, TuneStatus.DUPLICATE_BINARY)


def matmul_recipe(n: int) -> LaunchRecipe:
    return LaunchRecipe(
        "matmul_kernel",
        {"a_ptr": TensorSpec((n, n)), "b_ptr": TensorSpec((n, n)), "c_ptr": TensorSpec((n, n), init="empty", output=True),
         "M": n, "N": n, "K": n, "stride_am": "K", "stride_ak": 1, "stride_bk": "N", "stride_bn": 1, "stride_cm": "N", "stride_cn": 1},
        grid="(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))",
    )


def test_real_configs_of_real_kernels_are_pruned_by_the_sm90_compiler():
    """Compiles for the H200 on this CPU (pipeline.profiler.static): shared memory, spills and duplicates, for real."""
    gemm = Sm90Compiler(str(ROOT / "examples" / "candidates" / "matmul_triton.py"), matmul_recipe(1024))
    device = ScriptedEvaluator(lambda c: 1.0)
    configs = [cfg(16, 16, 16, stages=3), cfg(32, 256, 128, warps=8, stages=5), cfg(64, 64, 32, warps=1)]
    with PrunedEvaluator(device, gemm, workers=2) as pruner:
        results = pruner.evaluate(configs)
    assert [r.status for r in results] == [TuneStatus.OK, TuneStatus.SHARED_OVERFLOW, TuneStatus.SPILLS], [r.detail for r in results]
    assert int(results[1].detail.split()[0]) > 232_448

    elementwise = Sm90Compiler(str(ROOT / "examples" / "candidates" / "elementwise_triton.py"), LaunchRecipe(
        "gelu_scale_bias_kernel",
        {"x_ptr": TensorSpec((64, 256)), "bias_ptr": TensorSpec((256,)), "out_ptr": TensorSpec((64, 256), output=True),
         "n_elements": 64 * 256, "n_cols": 256, "scale": 1.7},
        grid="(cdiv(n_elements, BLOCK_SIZE),)",
    ))
    configs = [Config(BLOCK_SIZE=1024, num_warps=4, num_stages=s) for s in (1, 2, 3)] + [Config(BLOCK_SIZE=512, num_warps=4, num_stages=1)]
    results = PrunedEvaluator(device, elementwise, workers=0).evaluate(configs)  # loop-free: stages change nothing
    assert [r.status for r in results] == [TuneStatus.OK] + [TuneStatus.DUPLICATE_BINARY] * 2 + [TuneStatus.OK]
