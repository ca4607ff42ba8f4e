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
_sleep = torch.cuda._sleep


@dataclass(frozen=True)
class Samples:
    """Per-trial times of one timed function: device time between events, and host time to a full-device sync."""

    event_ms: tuple[float, ...]
    wall_ms: tuple[float, ...]
    method: str
    launch_ms: tuple[float, ...] = ()  # host time for the call to return (its launches queued)


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


_spin_cycles_per_ms: float | None = None


def head_start(ms: float) -> None:
    """Queue a spin of about `ms` on the current stream: the GPU stays busy while the host queues what comes next,
    so the next call's launch latency on the host does not count as device time."""
    global _spin_cycles_per_ms
    if ms <= 0:
        return
    if _spin_cycles_per_ms is None:  # calibrate once: cycles per ms at the clock the GPU runs now
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _sleep(1000)
        _record(start)
        _sleep(2_000_000)
        _record(end)
        _synchronize()
        _spin_cycles_per_ms = 2_000_000 / max(_elapsed(start, end), 1e-3)
    _sleep(int(ms * _spin_cycles_per_ms))


def time_calls(
    call: Callable[[], Any],
    prepare: Callable[[int], None],
    *,
    warmup: int,
    trials: int,
    flush: L2Flush,
    on_output: Callable[[int, Any], None] | None = None,
    head_start_ms: float = 0.0,
) -> Samples:
    """Time `call()` `trials` times after `warmup` untimed calls.

    Before each trial `prepare(i)` loads the trial's inputs (outside the clock) and L2 is flushed. The device time
    is taken between CUDA events on the current stream; the host time runs to a sync of the whole device, so work
    pushed to other streams or threads shows up as a gap between the two. `on_output(i, out)` sees every trial's
    output after that sync (it can verify or keep it).

    The flush, then a spin of `head_start_ms`, are queued but not waited for: the GPU is busy with them while the
    host launches the call, so the host's launch latency does not land inside the events. On a shared host that
    latency comes in slow episodes of seconds (measured on the H200 machine: +0.1 ms on a 1 ms kernel); host time
    beyond the head start still counts. `launch_ms` records how long each call took to return on the host.
    """
    for i in range(warmup):
        prepare(i)
        call()
    _synchronize()
    before, start, end = (_Event(enable_timing=True) for _ in range(3))
    event_ms, wall_ms, launch_ms = [], [], []
    for i in range(trials):
        prepare(i)
        _synchronize()
        t0 = _perf_counter()  # the device is idle: `before` fires as soon as it is queued
        _record(before)
        flush()
        head_start(head_start_ms)
        t1 = _perf_counter()
        _record(start)
        out = call()
        launched = _perf_counter()
        _record(end)
        _synchronize()
        done = _perf_counter()
        # host time to the full-device sync, less the flush and head start as the device ran them: from `start` on
        wall_ms.append((done - t0) * 1e3 - _elapsed(before, start))
        launch_ms.append((launched - t1) * 1e3)
        event_ms.append(_elapsed(start, end))
        if on_output is not None:
            on_output(i, out)
    return Samples(tuple(event_ms), tuple(wall_ms), "cuda_events", tuple(launch_ms))


def time_graph(call: Callable[[], Any], *, warmup: int, trials: int, flush: L2Flush, head_start_ms: float = 0.0) -> Samples:
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
    samples = time_calls(graph.replay, lambda i: None, warmup=warmup, trials=trials, flush=flush, head_start_ms=head_start_ms)
    return Samples(samples.event_ms, samples.wall_ms, "cuda_graph", samples.launch_ms)


def copy_bandwidth_bytes_per_s(device: torch.device, nbytes: int = 1 << 30, repeats: int = 10, head_start_ms: float = 0.0) -> float:
    """Measured device-to-device copy bandwidth, counting bytes read plus bytes written (each copy after a head
    start, as in `time_calls`)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    _synchronize()
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        head_start(head_start_ms)
        _record(start)
        dst.copy_(src)
        _record(end)
        _synchronize()
        times.append(_elapsed(start, end) / 1e3)
    return 2 * nbytes / statistics.median(times)
