"""The profiler's typed values: what a kernel did, what limits it (with evidence), and the whole ProfileReport.

Frozen dataclasses with the JSON round trip of `pipeline.types.to_jsonable/from_jsonable`. Standard library only.
Units live in the names: `_ms`, `_bytes`, `_per_s`, `_pct` (0-100).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.static import StaticFacts

KINDS = (
    "memory_bound",  # DRAM (or L2) bandwidth is the limit
    "compute_bound_tensor",  # the tensor-core pipe is the limit
    "compute_bound_fma",  # the FP32 FMA (or ALU) pipe is the limit
    "latency_bound",  # no unit is busy: warps wait (memory latency, barriers, dependencies)
    "occupancy_limited_registers",  # too few warps resident, because of registers per thread
    "occupancy_limited_shared",  # too few warps resident, because of shared memory per block
    "launch_bound",  # many tiny kernels, or too few blocks to fill the SMs
)
SOURCES = ("ncu", "torch_profiler", "static_only")


def time_text(ms: float) -> str:
    """A duration with a unit that keeps it readable: ns, us or ms, four significant digits."""
    if ms != ms or ms < 0:
        return f"{ms} ms"
    if ms < 1e-3:
        return f"{ms * 1e6:.4g} ns"
    if ms < 1:
        return f"{ms * 1e3:.4g} us"
    return f"{ms:.4g} ms"


def bytes_text(count: float) -> str:
    """A byte count in B, KB, MB or GB (powers of 1000), four significant digits."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count:.4g} B"


@dataclass(frozen=True)
class Evidence:
    """One fact behind a conclusion: which metric, its value, and what it means here."""

    metric: str  # an NCU metric name, or a derived quantity such as "achieved_bw_pct_of_ceiling"
    value: float | int | str
    meaning: str


@dataclass(frozen=True)
class Classification:
    """What limits a kernel (or the whole candidate), how far it is from the roofline, and why we think so."""

    kind: str  # one of KINDS
    roofline_distance_pct: float | None  # 0: on the roofline; 80: five times slower than the floor; None: no time
    evidence: tuple[Evidence, ...]
    summary: str  # one line for a person
    predicted: bool = False  # True when inferred without a measurement (static facts and the analytic roofline)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown classification kind {self.kind!r}; expected one of {', '.join(KINDS)}")


@dataclass(frozen=True)
class Ceilings:
    """What this device can do, measured on it (or nominal numbers, said so), for the roofline."""

    device: str  # GPU name, e.g. "NVIDIA H200"
    sms: int
    copy_bytes_per_s: float  # device-to-device copy bandwidth (bytes read + written per second)
    matmul_flops_per_s: dict[str, float]  # "fp32" (no TF32), "tf32", "bf16": dense GEMM rate
    source: str  # "measured", or "nominal" (numbers seen on an H200, used when none can be measured here)
    fingerprint: str = ""  # GPU name, driver and torch version: a new one means measuring again
    measured_at: str = ""  # ISO time

    def compute_flops_per_s(self, precision: str) -> float:
        return self.matmul_flops_per_s.get(precision, 0.0)


@dataclass(frozen=True)
class KernelProfile:
    """What one kernel (one name, grid and block; `calls` launches of it) did in the measured call."""

    name: str
    calls: int = 1
    duration_ms: float | None = None  # all calls together
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    dram_bytes: float | None = None  # read + written
    achieved_bw_bytes_per_s: float | None = None
    flops: float | None = None  # counted FP32 FMA work (2 per FFMA); tensor-core work is not in it
    achieved_flops_per_s: float | None = None
    sm_throughput_pct: float | None = None  # speed of light, compute side
    memory_throughput_pct: float | None = None  # speed of light, memory side (DRAM, L2, L1 at their peak)
    dram_throughput_pct: float | None = None
    l1_throughput_pct: float | None = None
    l2_throughput_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str | None = None  # "registers", "shared_memory", "warps", "blocks"
    registers_per_thread: int | None = None
    shared_bytes_per_block: int | None = None
    waves: float | None = None
    tensor_pipe_pct: float | None = None
    fma_pipe_pct: float | None = None
    issue_active_pct: float | None = None
    stalls: dict[str, float] = field(default_factory=dict)  # reason -> warps stalled per issued instruction, top first
    coalescing_pct: float | None = None  # useful bytes per 32-byte sector of global loads, in percent
    shared_bank_conflicts: float | None = None  # loads + stores
    static: StaticFacts | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # the raw counters, base units, for the agents
    classification: Classification | None = None

    @property
    def blocks(self) -> int | None:
        if not self.grid:
            return None
        total = 1
        for g in self.grid:
            total *= g
        return total

    @property
    def threads_per_block(self) -> int | None:
        if not self.block:
            return None
        total = 1
        for b in self.block:
            total *= b
        return total

    @property
    def mean_duration_us(self) -> float | None:
        return None if self.duration_ms is None else 1e3 * self.duration_ms / max(self.calls, 1)


@dataclass(frozen=True)
class ProfileReport:
    """The profile of one candidate on one problem, for the Profile Agent and for people."""

    source: str  # "ncu" (hardware counters), "torch_profiler" (kernel times only), "static_only" (no GPU)
    candidate_path: str
    candidate_sha256: str
    problem_path: str
    problem_fingerprint: str
    kernels: tuple[KernelProfile, ...]
    overall: Classification | None  # None when no kernel was seen at all
    ceilings: Ceilings | None
    costs: ProblemCosts | None
    total_kernel_ms: float | None  # sum over the measured call's kernels
    floor_ms: float | None  # the analytic roofline floor of the problem on these ceilings
    notes: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    raw_report: str = ""  # where the raw NCU report (.ncu-rep) was kept, if any
    profile_s: float = 0.0  # wall time spent profiling (the overhead per candidate)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown profile source {self.source!r}; expected one of {', '.join(SOURCES)}")

    @property
    def counters(self) -> bool:
        """True when the report rests on hardware counters (NCU), not on times or static facts alone."""
        return self.source == "ncu"


def compact(report: ProfileReport, max_kernels: int = 4, max_evidence: int = 5) -> dict:
    """The report as the Profile Agent is shown it: the bound with its evidence and the slowest kernels' key
    numbers, without raw counters or paths (a few hundred tokens). Absent values are left out, never invented."""
    cls = report.overall
    bound = None
    if cls is not None:
        evidence = [{"metric": e.metric, "value": e.value, "meaning": e.meaning} for e in cls.evidence[:max_evidence]]
        bound = {"kind": cls.kind, "predicted": cls.predicted, "summary": cls.summary, "roofline_distance_pct": cls.roofline_distance_pct, "evidence": evidence}
    kernels = sorted(report.kernels, key=lambda k: -(k.duration_ms or 0.0))[:max_kernels]
    return _without_none(
        {
            "source": report.source,
            "hardware_counters": report.counters,
            "bound": bound,
            "kernel_ms": report.total_kernel_ms,
            "floor_ms": report.floor_ms,
            "kernels": [_compact_kernel(k) for k in kernels],
            "more_kernels": max(0, len(report.kernels) - max_kernels) or None,
            "notes": list(report.notes) or None,
        }
    )


def _compact_kernel(k: KernelProfile) -> dict:
    cls, s = k.classification, k.static
    return {
        "name": k.name,
        "calls": k.calls,
        "ms": k.duration_ms,
        "grid": list(k.grid) or None,
        "block": list(k.block) or None,
        "class": cls.kind if cls else None,
        "roofline_distance_pct": cls.roofline_distance_pct if cls else None,
        "memory_throughput_pct": k.memory_throughput_pct,
        "sm_throughput_pct": k.sm_throughput_pct,
        "achieved_occupancy_pct": k.achieved_occupancy_pct,
        "theoretical_occupancy_pct": k.theoretical_occupancy_pct,
        "occupancy_limiter": k.occupancy_limiter,
        "registers": k.registers_per_thread,
        "shared_bytes": k.shared_bytes_per_block,
        "tensor_pipe_pct": k.tensor_pipe_pct,
        "coalescing_pct": k.coalescing_pct,
        "stalls": k.stalls or None,
        "static": {"spilled_bytes": s.spilled_bytes, "uses_wgmma": s.uses_wgmma, "uses_tma": s.uses_tma, "constexprs": s.constexprs, "num_warps": s.num_warps, "num_stages": s.num_stages, "problems": list(s.launch_problems()) or None}
        if s
        else None,
    }


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
