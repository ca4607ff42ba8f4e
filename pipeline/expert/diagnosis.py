"""The Profile role by rules: from the profiler's classification to the Diagnosis a Profile Agent would return.

Each bottleneck carries the profiler's own evidence, and each fix names the evidence that calls for it. Fixes are
ranked for the stage asking (parallel mapping wants grid changes first, tiling wants tile sizes, memory wants
access patterns), and the expected gain is bounded by the distance to the roofline when one is known.
"""

from __future__ import annotations

from pipeline.agents.backend import Measurements, NoProposal
from pipeline.agents.replies import Bottleneck, Diagnosis, Evidence, Fix
from pipeline.profiler.report import Classification, KernelProfile

# Per classification kind: (stage it belongs to, change). The stage decides the order for the stage asking.
FIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "memory_bound": (
        ("memory", "coalesce global accesses: the innermost block dimension runs along the contiguous dimension"),
        ("memory", "wider vector accesses: BLOCK a multiple of 8 elements and tl.multiple_of / tl.max_contiguous hints"),
        ("algorithm", "fuse the remaining passes so every byte is read from DRAM once"),
        ("memory", "software pipelining: num_stages 3-4 so loads overlap the arithmetic"),
        ("tiling", "larger tiles along the contiguous dimension to cut per-program overhead"),
    ),
    "compute_bound_tensor": (
        ("tiling", "larger output tiles (BLOCK_M, BLOCK_N 128-256) for more reuse per loaded byte"),
        ("memory", "deeper software pipelining (num_stages 3-5) to keep the tensor cores fed"),
        ("parallel_mapping", "grouped (swizzled) program order so neighbouring programs share tiles in L2"),
    ),
    "compute_bound_fma": (
        ("algorithm", "move the matrix-shaped arithmetic onto tl.dot (tensor cores), input_precision='ieee' for fp32"),
        ("algorithm", "remove redundant arithmetic: hoist loop-invariant work, reuse computed values"),
        ("tiling", "tiles whose inner dimension is a multiple of 16 so tl.dot can be used"),
    ),
    "latency_bound": (
        ("parallel_mapping", "more programs: a smaller BLOCK or a split reduction, so every SM has several blocks"),
        ("tiling", "more warps in flight: num_warps 4-8 with tiles sized for them"),
        ("memory", "software pipelining: num_stages 3-4 to hide global-memory latency"),
    ),
    "occupancy_limited_registers": (
        ("tiling", "smaller tiles or fewer live values, so registers per thread fall below the next occupancy step"),
        ("tiling", "fewer warps per program (num_warps) with the same tile, or split the tile"),
    ),
    "occupancy_limited_shared": (
        ("memory", "fewer pipeline stages (num_stages) so more blocks fit the 228 KB of shared memory per SM"),
        ("tiling", "smaller tiles along K to cut shared memory per block"),
    ),
    "launch_bound": (
        ("parallel_mapping", "fill the 132 SMs: map more of the output onto the grid (smaller BLOCK per program)"),
        ("algorithm", "fuse the kernels into one launch so the host's launch latency is paid once"),
        ("parallel_mapping", "a persistent grid of one program per SM looping over tiles"),
    ),
}
STAGE_ORDER = ("algorithm", "parallel_mapping", "tiling", "memory")
MAX_EVIDENCE = 4


def diagnose(measurements: Measurements, stage: str) -> Diagnosis | NoProposal:
    """A Diagnosis from the profile report's classification (overall, then the slowest kernels'), for `stage`."""
    report = measurements.report
    if report is None or report.overall is None:
        why = measurements.error or "the profiler saw no kernel"
        return NoProposal(f"no profile to diagnose from: {why}")
    seen: set[str] = set()
    bottlenecks = []
    for classification in _classifications(report.overall, report.kernels):
        if classification.kind in seen:
            continue
        seen.add(classification.kind)
        bottlenecks.append(_bottleneck(classification, stage))
    return Diagnosis(bottlenecks=bottlenecks)


def _classifications(overall: Classification, kernels: tuple[KernelProfile, ...]) -> list[Classification]:
    slowest = sorted((k for k in kernels if k.classification), key=lambda k: -(k.duration_ms or 0.0))
    return [overall, *(k.classification for k in slowest)]


def _bottleneck(classification: Classification, stage: str) -> Bottleneck:
    evidence = [Evidence(metric=e.metric, value=_value_text(e.value), interpretation=e.meaning)
                for e in classification.evidence[:MAX_EVIDENCE]]
    if classification.predicted:
        evidence.append(Evidence(metric="profile_source", value="predicted", interpretation="inferred from static sm_90 facts, not measured"))
    cause = evidence[0]
    gain = _gain_ceiling(classification)
    fixes = sorted(FIXES[classification.kind], key=lambda fix: _rank(fix[0], stage))
    ranked = [
        Fix(change=f"{change} (called for by {cause.metric} = {cause.value})", expected_gain_pct=round(gain / (rank + 1), 1))
        for rank, (_, change) in enumerate(fixes)
    ]
    return Bottleneck(name=classification.kind, evidence=evidence, fixes=ranked)


def _rank(fix_stage: str, stage: str) -> int:
    """0 for the asking stage's own fixes, then the later stages, then the earlier ones."""
    if fix_stage == stage:
        return 0
    order = STAGE_ORDER.index(fix_stage) - STAGE_ORDER.index(stage) if stage in STAGE_ORDER else 0
    return 1 + (order if order > 0 else len(STAGE_ORDER) - order)


def _gain_ceiling(classification: Classification) -> float:
    """The time a perfect fix could save, in percent: the distance to the roofline, or a modest guess without one."""
    distance = classification.roofline_distance_pct
    return max(1.0, min(90.0, distance)) if distance is not None else 20.0


def _value_text(value: float | int | str) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
