"""Device timing: one function times candidates and baselines alike.

Imported by the worker: torch and the standard library only. The clock's tools are captured when this module is
imported (before any candidate code runs), so a candidate that patches them later does not change our numbers.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize


@dataclass(frozen=True)
class Samples:
    """Per-trial times of one timed function: device time between events, and host time to a full-device sync."""

    event_ms: tuple[float, ...]
    wall_ms: tuple[float, ...]
    method: str


def summarize(samples_ms: tuple[float, ...] | list[float], method: str) -> dict[str, Any]:
    """Median, mean, std and a distribution-free 95% interval for the median (order statistics)."""
    data = sorted(samples_ms)
    n = len(data)
    half_width = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half_width) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half_width))
    return {
        "median_ms": statistics.median(data),
        "mean_ms": statistics.fmean(data),
        "std_ms": statistics.stdev(data) if n > 1 else 0.0,
        "ci95_low_ms": data[lo],
        "ci95_high_ms": data[hi],
        "trials": n,
        "method": method,
    }


class L2Flush:
    """Writes a buffer larger than L2 so that no trial starts with its data in cache."""

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self._buffer = torch.empty(max(nbytes // 4, 1), dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self._buffer.zero_()


def time_calls(
    call: Callable[[], Any],
    prepare: Callable[[int], None],
    *,
    warmup: int,
    trials: int,
    flush: L2Flush,
    on_output: Callable[[int, Any], None] | None = None,
) -> Samples:
    """Time `call()` `trials` times after `warmup` untimed calls.

    Before each trial `prepare(i)` loads the trial's inputs (outside the clock) and L2 is flushed. The device time
    is taken between CUDA events on the current stream; the host time runs to a sync of the whole device, so work
    pushed to other streams or threads shows up as a gap between the two. `on_output(i, out)` sees every trial's
    output after that sync (it can verify or keep it).
    """
    for i in range(warmup):
        prepare(i)
        call()
    _synchronize()
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    event_ms, wall_ms = [], []
    for i in range(trials):
        prepare(i)
        _synchronize()
        # The flush is queued, not waited for: the GPU is still busy with it while the call is launched, so no
        # host launch gap lands inside the events (as in triton.testing.do_bench). The host clock starts here too,
        # so the flush's tail counts against the side-stream check's slack, not against the candidate.
        flush()
        t0 = _perf_counter()
        _record(start)
        out = call()
        _record(end)
        _synchronize()
        wall_ms.append((_perf_counter() - t0) * 1e3)
        event_ms.append(_elapsed(start, end))
        if on_output is not None:
            on_output(i, out)
    return Samples(tuple(event_ms), tuple(wall_ms), "cuda_events")


def time_graph(call: Callable[[], Any], *, warmup: int, trials: int, flush: L2Flush) -> Samples:
    """Time replays of a CUDA graph captured from `call()` (launch gaps removed)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(warmup, 1)):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    samples = time_calls(graph.replay, lambda i: None, warmup=warmup, trials=trials, flush=flush)
    return Samples(samples.event_ms, samples.wall_ms, "cuda_graph")


def copy_bandwidth_bytes_per_s(device: torch.device, nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Measured device-to-device copy bandwidth, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    _synchronize()
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        _record(start)
        dst.copy_(src)
        _record(end)
        _synchronize()
        times.append(_elapsed(start, end) / 1e3)
    return 2 * nbytes / statistics.median(times)
