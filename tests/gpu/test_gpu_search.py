"""The batched measurement worker on a CUDA GPU: real timing, early stopping, correctness checks, and a small real
tune. Run on the GPU machine: pytest -m gpu tests/gpu/test_gpu_search.py"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.tuning.measure import BatchMeasurer, MeasureSettings
from pipeline.tuning.measurement import TuneStatus
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec
from pipeline.tuning.space import Config, IntRange, PowerOfTwo, Space
from pipeline.tuning.strategy import Budget
from pipeline.tuning.tune import Layers, TuneRequest, tune

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
ELEMENTWISE = ROOT / "examples" / "candidates" / "elementwise_triton.py"
ROWS, COLS = 4096, 4096
RECIPE = LaunchRecipe(
    "gelu_scale_bias_kernel",
    {"x_ptr": TensorSpec((ROWS, COLS)), "bias_ptr": TensorSpec((COLS,)), "out_ptr": TensorSpec((ROWS, COLS), init="empty", output=True),
     "n_elements": ROWS * COLS, "n_cols": COLS, "scale": 1.7},
    grid="(cdiv(n_elements, BLOCK_SIZE),)",
)


@pytest.fixture(autouse=True)
def need_gpu():
    if not torch.cuda.is_available():
        pytest.fail("tests marked gpu need a CUDA GPU")


def test_configs_are_timed_and_hopeless_ones_stop_early():
    # With a factor of 1.0 any config whose fastest probe trial is slower than the best so far stops early.
    settings = MeasureSettings(trials=20, too_slow_factor=1.0)
    configs = [Config(BLOCK_SIZE=b, num_warps=w) for b, w in ((1024, 4), (128, 1), (2048, 8), (4096, 4))]
    with BatchMeasurer(ELEMENTWISE, RECIPE, settings, reference_config=configs[0]) as measurer:
        assert measurer.start()["device"] == "cuda"
        results = measurer.evaluate(configs)
        best_ms = measurer.best_ms
    assert results[0].status is TuneStatus.OK and results[0].time_ms > 0 and results[0].trials == 20
    assert "registers=" in results[0].detail
    assert all(r.status in (TuneStatus.OK, TuneStatus.TOO_SLOW) for r in results), [r.detail for r in results]
    slow = results[1]  # 128 elements per program on one warp: eight times the programs of the first
    assert slow.status is TuneStatus.TOO_SLOW and slow.trials == settings.probe_trials and slow.time_ms > best_ms, slow
    assert best_ms == min(r.time_ms for r in results if r.status is TuneStatus.OK)


def test_a_config_that_changes_results_is_rejected_on_the_gpu():
    recipe = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((64, 24)), "out_ptr": TensorSpec((64,), output=True), "n_cols": 24}, grid="(64,)")
    with BatchMeasurer(ROOT / "tests" / "fixtures" / "search" / "row_sum.py", recipe, MeasureSettings(trials=5), reference_config={"BLOCK": 32}) as measurer:
        results = measurer.evaluate([Config(BLOCK=8), Config(BLOCK=64), Config(BLOCK=128)])
    assert [r.status for r in results] == [TuneStatus.MISMATCH, TuneStatus.OK, TuneStatus.COMPILE_ERROR]


def test_a_real_tune_prunes_on_the_cpu_measures_on_the_gpu_and_bakes_the_winner(tmp_path):
    space = Space((PowerOfTwo("BLOCK_SIZE", 256, 4096), PowerOfTwo("num_warps", 2, 8), IntRange("num_stages", 1, 2)),
                  default=Config(BLOCK_SIZE=1024, num_warps=4, num_stages=2))
    request = TuneRequest(str(ELEMENTWISE), RECIPE, space, strategy="pattern", budget=Budget(max_evals=8),
                          settings=MeasureSettings(trials=10))
    result = tune(request, Layers(compile_workers=4))
    assert result.best is not None and result.best.time_ms > 0
    assert result.evaluations <= 8
    assert any(t.status is TuneStatus.DUPLICATE_BINARY for t in result.history)  # num_stages: no loop, same binary
    assert result.source is not None or result.rewrite_error == ""


def test_a_kernel_file_that_starts_a_shell_is_measured_inside_the_sandbox():
    """The measuring worker imports the kernel file in the judge's sandbox, on the GPU too: the payload sees itself
    as PID 2 of its own namespace and (under root) not root, and its configurations are timed."""
    import re

    spawning = ROOT / "tests" / "fixtures" / "search" / "spawning_row_sum.py"
    recipe = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((6, 24)), "out_ptr": TensorSpec((6,), output=True), "n_cols": 24}, grid="(6,)")
    with BatchMeasurer(spawning, recipe, MeasureSettings(trials=10)) as measurer:
        results = measurer.evaluate([Config(BLOCK=32), Config(BLOCK=64)])
        log = measurer.log_tail()
    assert [r.status for r in results] == [TuneStatus.OK, TuneStatus.OK], [r.detail for r in results]
    assert all(r.time_ms and r.time_ms > 0 for r in results)
    (seen,) = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in log.splitlines() if line.startswith("PAYLOAD")]
    assert seen["pid"] == "2" and seen["uid"] != "0" and seen["secrets"] == "none", seen
