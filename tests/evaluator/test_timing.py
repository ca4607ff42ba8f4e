"""The judge's timing facts that need no GPU: the host-bound flag read from a worker's timing summaries."""

from __future__ import annotations

from egg.evaluator import timing
from egg.evaluator.judge import host_bound_flag


def result(device_ms: float, launch_ms: float | None) -> dict:
    out = {"timing": timing.summarize([device_ms] * 5, "cuda_events")}
    if launch_ms is not None:
        out["timing_launch"] = timing.summarize([launch_ms] * 5, "host_launch")
    return out


def test_a_call_the_host_launches_slower_than_the_device_runs_is_flagged():
    flag = host_bound_flag(result(device_ms=0.05, launch_ms=0.4))
    assert flag is not None and flag.name == "host_bound"
    assert "0.4 ms" in flag.message and "0.05 ms" in flag.message


def test_a_device_bound_call_is_not_flagged():
    assert host_bound_flag(result(device_ms=1.04, launch_ms=0.06)) is None


def test_no_flag_without_device_timing_or_launch_times():
    assert host_bound_flag({}) is None
    assert host_bound_flag(result(device_ms=0.05, launch_ms=None)) is None


def test_no_head_start_queues_nothing():
    timing.head_start(0.0)  # on a machine without CUDA this would raise if it queued a spin
    assert timing._spin_cycles_per_ms is None
