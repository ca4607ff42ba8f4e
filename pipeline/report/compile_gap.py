"""The one wording of a kept kernel that is slower than torch.compile, with the reason the profiler gives.

`egg optimize` (the CLI's summary), report.md, evidence.json, a session's stored outcome (the app) and egg bench's
results all say it with `versus_compile`; nothing here imports a UI.
"""

from __future__ import annotations

from typing import Any

from pipeline.profiler.report import time_text

NO_PROFILE = "no profile of this kernel was taken in this run"
SOURCES = {"ncu": "hardware counters", "torch_profiler": "kernel times only", "static_only": "static facts only"}


def versus_compile(speedups: dict[str, float] | None, *, kernel_ms: float | None = None, compile_ms: float | None = None,
                   floor_ms: float | None = None, profile: dict[str, Any] | None = None, no_profile: str = NO_PROFILE) -> str:
    """"" when the kernel is at least as fast as torch.compile or no torch.compile baseline was timed; else one
    line: "slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): <reason>". The reason is the profiler's view:
    the kernel's time against the physical floor (the judge's, else the profile's) and the profile's bottleneck
    (`profile` is a ProfileReport as JSON); without a profile it says so (`no_profile`)."""
    speedup = (speedups or {}).get("compile")
    if speedup is None or speedup >= 1.0:
        return ""
    times = f": the kernel {time_text(kernel_ms)}, torch.compile {time_text(compile_ms)}" if kernel_ms and compile_ms else ""
    return f"slower than torch.compile ({speedup:.3f}x{times}): {compile_gap_reason(kernel_ms, floor_ms, profile, no_profile)}"


def compile_gap_reason(kernel_ms: float | None, floor_ms: float | None, profile: dict[str, Any] | None, no_profile: str = NO_PROFILE) -> str:
    """What the profiler says of a kernel's time: how far it is from its physical floor, and what limits it."""
    profile = profile or {}
    floor = floor_ms or profile.get("floor_ms")
    parts = []
    if kernel_ms and floor:
        ratio = kernel_ms / floor
        parts.append(f"the kernel takes {ratio:.1f}x its physical floor of {time_text(floor)}" if ratio > 1.1 else
                     f"the kernel runs at its physical floor of {time_text(floor)}")
    elif not floor:
        parts.append("no physical floor on record")
    overall = profile.get("overall") or {}
    if overall.get("summary"):
        source = SOURCES.get(profile.get("source", ""), profile.get("source", ""))
        parts.append(f"the profiler ({source}) says {overall['summary']}")
    elif profile:
        parts.append("the profile named no bottleneck (no kernel seen)")
    else:
        parts.append(no_profile)
    return "; ".join(parts)
