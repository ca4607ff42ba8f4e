"""The batched measurement worker on the CPU (Triton's interpreter): timing is skipped, but every config's output is
checked, and a config that changes results, hangs, or crashes the process is named without stopping the batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.tuning.measure import BatchMeasurer, MeasureError, MeasureSettings
from pipeline.tuning.recipe import LaunchRecipe, RecipeError, TensorSpec
from pipeline.tuning.space import Config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "search"
CPU = MeasureSettings(device="cpu", config_timeout_s=60, setup_timeout_s=60)
ROW_SUM = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((6, 24)), "out_ptr": TensorSpec((6,), output=True), "n_cols": 24}, grid="(6,)")


def statuses(results) -> list[str]:
    return [r.status.value for r in results]


def test_configs_that_change_results_are_rejected_against_the_reference_config():
    with BatchMeasurer(FIXTURES / "row_sum.py", ROW_SUM, CPU, reference_config={"BLOCK": 32}) as measurer:
        assert measurer.start()["device"] == "cpu"
        results = measurer.evaluate([Config(BLOCK=b) for b in (8, 16, 32, 64, 128)])
    # BLOCK 8 and 16 drop columns of a 24-wide row; 128 trips the kernel's static assert.
    assert statuses(results) == ["mismatch", "mismatch", "ok", "ok", "runtime_error"]
    assert "6 of 6 elements differ" in results[0].detail
    assert results[2].time_ms is None and "timing skipped" in results[2].detail
    assert "AssertionError" in results[4].detail
    assert all(r.measured for r in results)


def test_without_a_reference_config_the_first_config_that_runs_is_the_reference():
    with BatchMeasurer(FIXTURES / "row_sum.py", ROW_SUM, CPU) as measurer:
        results = measurer.evaluate([Config(BLOCK=32), Config(BLOCK=8), Config(BLOCK=64)])
    assert statuses(results) == ["ok", "mismatch", "ok"]


COPY = LaunchRecipe("copy_kernel", {"x_ptr": TensorSpec((16,)), "out_ptr": TensorSpec((16,), output=True), "n": 16}, grid="(1,)")


def test_a_config_that_hangs_or_kills_the_worker_is_named_and_the_rest_are_measured():
    settings = MeasureSettings(device="cpu", config_timeout_s=6, setup_timeout_s=60)
    configs = [Config(BLOCK=16, REPEAT=r, OFFSET=o) for r, o in ((1, 0), (10**9, 0), (2, 0), (1, 1 << 40), (3, 0))]
    with BatchMeasurer(FIXTURES / "copy_kernel.py", COPY, settings, reference_config=configs[0]) as measurer:
        results = measurer.evaluate(configs)
    assert statuses(results) == ["ok", "timeout", "ok", "runtime_error", "ok"]
    assert "within 6 s" in results[1].detail
    assert "the worker died (exit code -11)" in results[3].detail


def test_a_kernel_that_cannot_be_set_up_stops_with_one_clear_error():
    recipe = LaunchRecipe("no_such_kernel", COPY.args, grid="(1,)")
    with pytest.raises(MeasureError, match="defines no no_such_kernel"):
        with BatchMeasurer(FIXTURES / "copy_kernel.py", recipe, CPU) as measurer:
            measurer.start()


def test_recipes_are_checked_and_round_trip():
    assert LaunchRecipe.from_json(ROW_SUM.to_json()) == ROW_SUM
    assert ROW_SUM.grid_for({"BLOCK": 8}) == (6,)
    recipe = LaunchRecipe("k", {"x": TensorSpec((8,), output=True), "M": 100, "half": "M // 2"}, grid="cdiv(half, BLOCK)")
    assert recipe.scalars() == {"M": 100, "half": 50} and recipe.grid_for({"BLOCK": 16}) == (4,)
    assert recipe.signature() != ROW_SUM.signature()
    with pytest.raises(RecipeError, match="nothing to check"):
        LaunchRecipe("k", {"x": TensorSpec((8,))}, grid="(1,)")
    with pytest.raises(RecipeError, match="unknown name 'N'"):
        LaunchRecipe("k", {"x": TensorSpec((8,), output=True), "M": "N + 1"}, grid="(1,)")
    with pytest.raises(RecipeError, match="grid"):
        LaunchRecipe("k", {"x": TensorSpec((8,), output=True)}, grid="import os")


def test_timing_stops_early_only_when_every_probe_trial_is_far_behind_the_best():
    from pipeline.tuning.worker import too_slow

    assert too_slow([3.1, 3.4, 3.2], best_ms=2.0, factor=1.5)
    assert not too_slow([3.1, 2.9, 3.2], best_ms=2.0, factor=1.5)  # one fast trial: measure it fully
    assert not too_slow([9.0], best_ms=None, factor=1.5)  # nothing to compare with yet
