"""Kernel times from a torch profiler (Kineto) chrome trace: the fallback when no counters can be read.

Each GPU kernel event (`"cat": "kernel"`) carries its duration in microseconds and, from CUPTI, its grid, block,
registers per thread, shared memory and an estimated occupancy. Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.profiler.report import KernelProfile

KERNEL_CATEGORIES = ("kernel",)


def kernel_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU kernel events of a chrome trace, in time order."""
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") in KERNEL_CATEGORIES and e.get("ph") == "X"]
    return sorted(events, key=lambda e: e.get("ts", 0))


def profiles_from_trace(trace: dict[str, Any]) -> list[KernelProfile]:
    """One KernelProfile per (kernel, grid, block), times summed over its launches."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for event in kernel_events(trace):
        args = event.get("args", {})
        key = (event.get("name", "?"), tuple(args.get("grid", ())), tuple(args.get("block", ())))
        groups.setdefault(key, []).append(event)
    return [_profile(name, grid, block, events) for (name, grid, block), events in groups.items()]


def _profile(name: str, grid: tuple, block: tuple, events: list[dict[str, Any]]) -> KernelProfile:
    args = events[0].get("args", {})
    occupancy = args.get("est. achieved occupancy %")
    return KernelProfile(
        name=short_name(name),
        calls=len(events),
        duration_ms=sum(float(e.get("dur", 0.0)) for e in events) / 1e3,
        grid=tuple(int(g) for g in grid),
        block=tuple(int(b) for b in block),
        achieved_occupancy_pct=float(occupancy) if occupancy is not None else None,
        registers_per_thread=_int(args.get("registers per thread")),
        shared_bytes_per_block=_int(args.get("shared memory")),
    )


def short_name(name: str) -> str:
    """`void at::native::(anonymous)::fill_kernel<...>(...)` -> `fill_kernel`; Triton names pass unchanged."""
    head = name.replace("(anonymous namespace)", "").split("(", 1)[0]
    head = head.split("<", 1)[0].strip()
    return head.rsplit("::", 1)[-1].split()[-1] if head else name


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def load_trace(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
