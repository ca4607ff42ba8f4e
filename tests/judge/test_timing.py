"""The judge's timing facts that need no GPU: the host-bound flag read from a worker's timing summaries, and the
head start's settings and kernel."""

from __future__ import annotations

import pytest

from pipeline.judge import timing
from pipeline.judge.verdict import WorkerReport, host_bound_flag
from pipeline.tuning.measure import MeasureSettings
from pipeline.types import EvalOptions


def result(device_ms: float, launch_ms: float | None, capped: int = 0) -> WorkerReport:
    out = {"timing": timing.summarize([device_ms] * 5, "cuda_events"), "timing_head_start_capped": capped}
    if launch_ms is not None:
        out["timing_launch"] = timing.summarize([launch_ms] * 5, "host_launch")
    return WorkerReport.model_validate(out)


def test_a_call_the_host_launches_slower_than_the_device_runs_is_flagged():
    flag = host_bound_flag(result(device_ms=0.05, launch_ms=0.4))
    assert flag is not None and flag.name == "host_bound"
    assert "0.4 ms" in flag.message and "0.05 ms" in flag.message


def test_a_device_bound_call_is_not_flagged():
    assert host_bound_flag(result(device_ms=1.04, launch_ms=0.06)) is None


def test_no_flag_without_device_timing_or_launch_times():
    assert host_bound_flag(WorkerReport()) is None
    assert host_bound_flag(result(device_ms=0.05, launch_ms=None)) is None


def test_no_head_start_queues_nothing():
    timing.head_start(0.0)  # on a machine without CUDA this would raise if it queued a spin
    assert timing._spin_cycles_per_ms is None


def test_host_bound_flag_says_when_trials_outlasted_the_head_start():
    out = result(device_ms=0.05, launch_ms=3.0, capped=7)
    assert "7 timed trials outlasted the head start" in host_bound_flag(out).message


def test_head_start_specs_parse_and_bad_modes_are_refused():
    assert timing.parse_head_start("until_launched:2") == ("until_launched", 2.0)
    assert timing.parse_head_start("fixed:0.25") == ("fixed", 0.25)
    assert timing.parse_head_start("1") == ("fixed", 1.0)
    with pytest.raises(ValueError, match="unknown head start mode 'launch'"):
        timing.parse_head_start("launch:2")
    with pytest.raises(ValueError, match="head_start_mode must be one of fixed, until_launched"):
        EvalOptions(head_start_mode="launched")
    with pytest.raises(ValueError, match="head_start_ms must be >= 0"):
        EvalOptions(head_start_ms=-1)
    with pytest.raises(ValueError, match="head_start_mode"):
        MeasureSettings(head_start_mode="spin")


def test_the_flag_wait_compiles_for_hopper_without_a_gpu():
    """The until_launched kernel polls the host's flag with volatile loads, bounded by the global timer, and counts
    a wait that ran out with one atomic (its behaviour on the device: tests/gpu/test_gpu_timing.py)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=timing._wait_source(), signature={"flag_ptr": "*i64", "target": "i32", "cap_ns": "i32", "capped_ptr": "*i32"}, constexprs={})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1}).asm["ptx"]
    assert ptx.count("%globaltimer") >= 2  # read before and inside the loop
    assert "ld.volatile.global.b64" in ptx
    assert ptx.count("atom.global") == 1


def test_a_fixed_or_zero_head_start_needs_no_device_state():
    for head in (timing.HeadStart(0.0, "fixed"), timing.HeadStart(0.0, "until_launched")):
        head.queue()  # nothing is queued: on a machine without CUDA this would raise if it were
        head.launched()
        assert head.capped() == 0
    assert timing._spin_cycles_per_ms is None and timing._wait_compiled is None


def test_no_settling_makes_no_call():
    made = []
    assert timing.settle(lambda: made.append(1), lambda i: None, flush=None, ms=0.0) == 0
    assert made == []
    with pytest.raises(ValueError, match="warmup_ms must be >= 0"):
        EvalOptions(warmup_ms=-5)
