"""The timing loop's head starts on a CUDA GPU: what lands inside the events. Run on the GPU machine: pytest -m gpu."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from pipeline.judge import timing
from pipeline.judge.judge import Judge
from pipeline.types import EvalOptions, Status

from ..judge.conftest import candidate, problem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def flush():
    if not torch.cuda.is_available():
        pytest.fail("tests marked gpu need a CUDA GPU")
    return timing.L2Flush(64 << 20, torch.device("cuda"))


def slow_launcher(host_ms: float):
    """A call whose host side takes `host_ms` before it launches a few microseconds of device work."""
    x = torch.ones(1 << 16, device="cuda")

    def call():
        time.sleep(host_ms / 1e3)
        return x * 2

    return call


def median_ms(call, flush, **head) -> tuple[float, int]:
    samples = timing.time_calls(call, lambda i: None, warmup=2, trials=15, flush=flush, **head)
    return statistics.median(samples.event_ms), samples.head_start_capped


def test_without_a_head_start_the_host_latency_is_device_time(flush):
    ms, capped = median_ms(slow_launcher(3.0), flush, head_start_ms=0.0)
    assert ms > 2.5 and capped == 0


def test_until_launched_keeps_the_host_latency_out_of_the_events(flush):
    ms, capped = median_ms(slow_launcher(3.0), flush, head_start_ms=10.0, head_start_mode="until_launched")
    assert ms < 0.5 and capped == 0


def test_a_fixed_head_start_shorter_than_the_launch_leaves_the_rest_inside(flush):
    ms, _ = median_ms(slow_launcher(3.0), flush, head_start_ms=1.0, head_start_mode="fixed")
    assert 1.5 < ms < 2.8


def test_until_launched_gives_up_on_a_call_that_waits_for_the_gpu(flush):
    """A call that synchronizes waits for the spin, which waits for the call: the cap breaks the knot."""
    x = torch.ones(1 << 16, device="cuda")

    def syncing_call():
        torch.cuda.synchronize()
        return x * 2

    start = time.monotonic()
    ms, capped = median_ms(syncing_call, flush, head_start_ms=2.0, head_start_mode="until_launched")
    assert capped == 15  # every timed trial ran out its 2 ms wait
    assert time.monotonic() - start < 5
    assert ms < 0.5  # the call's device work itself; the wait was before the start event


def test_until_launched_with_graph_replay_and_copy_bandwidth(flush):
    x = torch.randn(1 << 20, device="cuda")
    graphed = timing.time_graph(lambda: x * 2, warmup=2, trials=10, flush=flush, head_start_ms=2.0, head_start_mode="until_launched")
    assert graphed.method == "cuda_graph" and graphed.head_start_capped == 0 and max(graphed.event_ms) < 1.0
    assert timing.copy_bandwidth_bytes_per_s(torch.device("cuda"), nbytes=1 << 28, head_start_ms=2.0, head_start_mode="until_launched") > 1e11


def test_the_judge_times_with_until_launched_and_its_kernel_is_not_the_candidates():
    with Judge(EvalOptions(device="cuda", timing_trials=20, head_start_mode="until_launched", head_start_ms=2.0)) as judge:
        result = judge.evaluate(problem("level1/23_Softmax.py"), candidate("softmax_ok.py"))
    assert result.status is Status.OK, result.reason
    assert result.timing is not None and result.timing.median_ms > 0
    assert result.kernels_launched and not any("wait_for_flag" in k for k in result.kernels_launched), result.kernels_launched


def test_settling_calls_back_to_back_and_counts_every_call(flush):
    x = torch.randn(1 << 22, device="cuda")
    made = []

    def call():
        made.append(1)
        return x * 2

    samples = timing.time_calls(call, lambda i: None, warmup=2, trials=5, flush=flush, warmup_ms=50.0)
    assert samples.calls == len(made)
    assert samples.calls > 2 + 5 + 20  # tens of microseconds a call: 50 ms of settling is hundreds of calls
    assert timing.time_calls(call, lambda i: None, warmup=2, trials=5, flush=flush).calls == 7
