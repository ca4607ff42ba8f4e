"""The tuning engine runs kernel files (user code) only in the judge's sandbox: its measuring worker and its compile
pool, each attacked by a kernel file whose module-level code starts a shell (tests/fixtures/search/spawning_row_sum.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pipeline.tuning.measure import BatchMeasurer, MeasureSettings
from pipeline.tuning.prune import PrunedEvaluator, Sm90Compiler
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec
from pipeline.tuning.scripted import ScriptedEvaluator
from pipeline.tuning.space import Config

SPAWNING = Path(__file__).resolve().parents[1] / "fixtures" / "search" / "spawning_row_sum.py"
ROW_SUM = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((6, 24)), "out_ptr": TensorSpec((6,), output=True), "n_cols": 24}, grid="(6,)")
MARKER = Path("/tmp/egg-spawning-row-sum-marker")


@pytest.fixture(autouse=True)
def a_secret_and_no_marker(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-kernels")
    MARKER.unlink(missing_ok=True)
    yield
    assert not MARKER.exists(), "the payload's file reached the machine's /tmp"


def payload_lines(log: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in log.splitlines() if line.startswith("PAYLOAD")]


def sandboxed(seen: dict[str, str]) -> None:
    assert seen["pid"] == "2", seen  # the job of its own PID namespace (1 is its init)
    assert seen["secrets"] == "none", seen
    if os.geteuid() == 0:
        assert seen["uid"] != "0" and seen["shell_uid"] != "0", seen


def test_the_measuring_worker_runs_a_spawning_kernel_in_the_sandbox():
    with BatchMeasurer(SPAWNING, ROW_SUM, MeasureSettings(device="cpu", config_timeout_s=60, setup_timeout_s=60)) as measurer:
        results = measurer.evaluate([Config(BLOCK=32), Config(BLOCK=64)])
        seen = payload_lines(measurer.log_tail())
    assert [r.status.value for r in results] == ["ok", "ok"], [r.detail for r in results]
    assert seen, "the payload did not run"
    sandboxed(seen[0])


def test_the_compile_pool_runs_a_spawning_kernel_in_the_sandbox():
    compiler = Sm90Compiler(str(SPAWNING), ROW_SUM)
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), compiler, workers=2) as pruner:
        results = pruner.evaluate([Config(BLOCK=32, num_warps=1), Config(BLOCK=64, num_warps=2)])
        logs = pruner._pool._log_tail()
    assert [r.status.value for r in results] == ["ok", "ok"], [r.detail for r in results]
    seen = payload_lines(logs.replace(" | ", "\n"))
    assert len(seen) == 2, logs  # both workers imported it, each in its own sandbox
    for one in seen:
        sandboxed(one)


FORGED = SPAWNING.with_name("forged_replies_row_sum.py")


def test_a_kernel_that_writes_on_the_measuring_workers_channel_gets_a_clear_error_not_a_crash():
    from pipeline.tuning.measure import MeasureError

    with pytest.raises(MeasureError, match="not a reply on its channel"):
        with BatchMeasurer(FORGED, ROW_SUM, MeasureSettings(device="cpu", config_timeout_s=60, setup_timeout_s=60)) as measurer:
            measurer.start()


def test_a_kernel_that_writes_on_the_compile_workers_channel_fails_its_configs_as_data():
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), Sm90Compiler(str(FORGED), ROW_SUM), workers=2) as pruner:
        results = pruner.evaluate([Config(BLOCK=32, num_warps=1), Config(BLOCK=64, num_warps=2)])
    assert [r.status.value for r in results] == ["compile_error", "compile_error"], [r.detail for r in results]
    assert all("the compile worker died" in r.detail for r in results)
