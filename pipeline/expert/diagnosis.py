"""The Profile role by rules: from the profiler's classification to the Diagnosis a Profile Agent would return.

Each bottleneck carries the profiler's own evidence, and each fix names the evidence that calls for it. Fixes are
ranked for the stage asking (parallel mapping wants grid changes first, tiling wants tile sizes, memory wants
access patterns), and the expected gain is bounded by the distance to the roofline when one is known.

For the expert backend's own kernels (`diagnose_kernel`) two more rules read the kernel's record: a GEMM whose
output tiles cannot fill the 132 SMs is an `underfilled_grid` (evidence: its tile count), and with no profile at all
the judge's time against the physical floor still yields a plan. Any kernel (a person's, a model's) has its measured
launch grid checked against the SMs in parallel mapping: too few programs, or a thin last wave.
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
        ("tiling", "larger tiles along the contiguous dimension (longer chunks of a streamed row) to cut per-program overhead"),
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
PERSISTENT = "persistent grid"  # the words of the one fix above that only a GEMM kernel can take
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


SMS = 132


def diagnose_kernel(kernel: str, measurements: Measurements, stage: str, feedback: str = "") -> Diagnosis | NoProposal:
    """The rules' Diagnosis of one kernel: the profile's classification, the expert's own evidence from the kernel's
    record, or the judge's timing alone. A fix that joins kernels is not offered for a file with one launch. Each
    line of `feedback` (one per rejection) is read for topics (pipeline.expert.steering): the fixes it says to avoid
    are dropped and those it prefers come first; a line with nothing to act on drops the plan's first fix."""
    from pipeline.expert.steering import launched_kernels, read_feedback, topics_of

    found = diagnose(measurements, stage)
    bottlenecks = list(found.bottlenecks) if isinstance(found, Diagnosis) else []
    grid = (_grid_evidence(kernel) or _launch_grid_evidence(kernel, measurements)) if stage == "parallel_mapping" else None
    if grid is not None:
        bottlenecks.insert(0, grid)
    if not isinstance(found, Diagnosis):  # no profile: the judge's time against the floor still says something
        timed = _timing_bottleneck(measurements, stage)
        bottlenecks += [timed] if timed is not None else []
    if not bottlenecks:
        return found if isinstance(found, NoProposal) else NoProposal("nothing to diagnose from")
    if _gemm_count(kernel) == 0:  # a persistent grid is a GEMM template's option: no fix for row or pointwise kernels
        bottlenecks = _keep_fixes(bottlenecks, lambda f: PERSISTENT not in f.change)
        if not bottlenecks:
            return NoProposal("the rules' only fixes for this kernel need a GEMM, and it has none")
    if len(launched_kernels(kernel)) == 1:  # one kernel: there is nothing to fuse it with
        bottlenecks = _keep_fixes(bottlenecks, lambda f: "fusion" not in topics_of(f.change))
    for line in [line for line in feedback.splitlines() if line.strip()]:
        steer = read_feedback(line)
        if steer.avoid:
            bottlenecks = _keep_fixes(bottlenecks, lambda f: not topics_of(f.change) & steer.avoid)
        if steer.prefer:
            bottlenecks = [Bottleneck(name=b.name, evidence=b.evidence,
                                      fixes=sorted(b.fixes, key=lambda f: not topics_of(f.change) & steer.prefer)) for b in bottlenecks]
        if not steer.avoid and not steer.prefer and bottlenecks:  # each such rejection drops the plan's first fix
            top = bottlenecks[0]
            bottlenecks = _keep_fixes([top], lambda f: f is not top.fixes[0]) + bottlenecks[1:]
    if not bottlenecks:
        return NoProposal("every fix the rules had for this kernel was rejected")
    return Diagnosis(bottlenecks=bottlenecks)


def _keep_fixes(bottlenecks: list[Bottleneck], keep) -> list[Bottleneck]:
    """The bottlenecks with only the fixes `keep` accepts; one left with none goes."""
    kept = [(b, [f for f in b.fixes if keep(f)]) for b in bottlenecks]
    return [Bottleneck(name=b.name, evidence=b.evidence, fixes=fixes) for b, fixes in kept if fixes]


def _gemm_count(kernel: str) -> int | None:
    """How many Triton GEMM kernels the expert's kernel has, from its record (None: not the expert's, or unknown)."""
    from pipeline.expert.lowering import Lowering
    from pipeline.expert.record import read
    from pipeline.expert.variants import facts

    record = read(kernel)
    lowering = Lowering.from_cache(record.problem) if record is not None else None
    return len(facts(lowering, record.options).matmuls) if lowering is not None else None


def _grid_evidence(kernel: str) -> Bottleneck | None:
    from pipeline.expert.algebra import split_k_slices
    from pipeline.expert.lowering import Lowering
    from pipeline.expert.record import read
    from pipeline.expert.variants import facts

    record = read(kernel)
    lowering = Lowering.from_cache(record.problem) if record is not None else None
    if lowering is None or record.options.split_k > 1:
        return None
    for m, n, k, _ in facts(lowering, record.options).gemms:
        tiles = -(-m // 128) * -(-n // 128)
        if split_k_slices(m, n, k) > 1:
            evidence = Evidence(metric="output_tiles", value=str(tiles),
                                interpretation=f"a {m}x{n} output in 128x128 tiles gives {tiles} programs for {SMS} SMs; K = {k} is long")
            fix = Fix(change=f"split K across more programs (split-K), called for by output_tiles = {tiles} < {SMS} SMs",
                      expected_gain_pct=round(min(80.0, 100.0 * (1 - tiles / SMS)), 1))
            return Bottleneck(name="underfilled_grid", evidence=[evidence], fixes=[fix])
    return None


def _launch_grid_evidence(kernel: str, measurements: Measurements) -> Bottleneck | None:
    """Any kernel's measured launch grid against the SMs: a grid of fewer programs than SMs leaves SMs idle, and a
    grid of a few waves with a thin last wave leaves most SMs idle for that wave. The fix names the block size the
    kernel's launches pass (a smaller one maps more programs), or says that its launch computes it."""
    from pipeline.expert.steering import launched_kernels

    report = measurements.report
    if report is None or not report.kernels:
        return None
    sms = report.ceilings.sms if report.ceilings is not None and report.ceilings.sms else SMS
    slowest = max((k for k in report.kernels if k.blocks), key=lambda k: k.duration_ms or 0.0, default=None)
    if slowest is None:
        return None
    blocks = slowest.blocks
    waves = blocks / sms
    tail = waves - int(waves)
    blocks_named = [name for k in launched_kernels(kernel) for name, v in k.values.items() if name.startswith("BLOCK") or name.endswith("BLOCK")]
    knob = f"a smaller {blocks_named[0]}" if blocks_named else "a smaller block per program (its launch computes the block size: write it as a number to tune it)"
    grid = "x".join(str(g) for g in slowest.grid)
    if blocks < sms:
        evidence = Evidence(metric="launch__grid_size", value=str(blocks),
                            interpretation=f"{slowest.name} launches a {grid} grid: {blocks} programs for {sms} SMs, {sms - blocks} SMs idle")
        fix = Fix(change=f"more programs per launch: {knob} (called for by launch__grid_size = {blocks} < {sms} SMs)",
                  expected_gain_pct=round(min(80.0, 100.0 * (1 - blocks / sms)), 1))
        return Bottleneck(name="underfilled_grid", evidence=[evidence], fixes=[fix])
    if 1 <= waves < 4 and 0 < tail <= 0.5:
        evidence = Evidence(metric="waves", value=f"{waves:.2f}",
                            interpretation=f"{slowest.name}: {blocks} programs on {sms} SMs; the last wave keeps {tail:.0%} of the SMs busy")
        fix = Fix(change=f"a grid of whole waves: {knob} or a larger one, so the programs are a multiple of {sms} "
                         f"(called for by waves = {waves:.2f})", expected_gain_pct=round(min(30.0, 100.0 * (1 - tail) / (int(waves) + 1)), 1))
        return Bottleneck(name="wave_tail", evidence=[evidence], fixes=[fix])
    return None


def _timing_bottleneck(measurements: Measurements, stage: str) -> Bottleneck | None:
    """Without a profile: how far the judge's median is from the physical floor, and the stage's generic fixes."""
    from pipeline.expert.variants import ranked

    verdict = measurements.verdict
    if verdict is None or verdict.timing is None or not verdict.physical_floor_ms:
        return None
    ratio = verdict.timing.median_ms / verdict.physical_floor_ms
    evidence = [Evidence(metric="median_ms", value=f"{verdict.timing.median_ms:.4g}", interpretation="the judge's median time"),
                Evidence(metric="physical_floor_ms", value=f"{verdict.physical_floor_ms:.4g}",
                         interpretation=f"{ratio:.1f}x the floor (bytes at copy bandwidth, or FLOPs at the tensor peak)")]
    gain = max(1.0, min(90.0, 100.0 * (1 - 1 / ratio)))
    fixes = [Fix(change=f"{v.name.replace('_', ' ')}: {v.why} (called for by median_ms = {ratio:.1f}x physical_floor_ms)",
                 expected_gain_pct=round(gain / (i + 1), 1))
             for i, v in enumerate(ranked(stage, None))]
    return Bottleneck(name="unprofiled", evidence=evidence, fixes=fixes) if fixes else None


def _classifications(overall: Classification, kernels: tuple[KernelProfile, ...]) -> list[Classification]:
    slowest = sorted((k for k in kernels if k.classification), key=lambda k: -(k.duration_ms or 0.0))
    return [overall, *(k.classification for k in slowest)]


def _bottleneck(classification: Classification, stage: str) -> Bottleneck:
    evidence = [Evidence(metric=e.metric, value=_value_text(e.value, e.metric), interpretation=e.meaning)
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


def _value_text(value: float | int | str, metric: str = "") -> str:
    """A reading as the plan shows it: times with a unit that keeps them readable (ns, us, ms)."""
    from pipeline.profiler.report import time_text

    if isinstance(value, float) and metric.endswith("_ms"):
        return time_text(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)
