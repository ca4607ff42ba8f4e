"""What limits a kernel, and the whole candidate: roofline classification with evidence for every conclusion.

With counters (NCU), the speed-of-light rule: whichever of memory throughput and SM throughput is >= 60% of peak
names the bound (DRAM, or the tensor/FMA pipe); when neither is, low occupancy caused by registers or shared
memory names it, else the kernel is latency-bound and its dominant stall says on what. Tiny kernels (< 10 us) and
grids too small to give every SM a block are launch-bound unless a unit is already saturated.
Without counters (torch profiler times, or static facts only) the same questions are answered from the grid,
the compiled resources (theoretical occupancy) and the problem's analytic roofline, and marked `predicted`.
Distance to the roofline: 100 * (1 - floor / measured time), the floor from bytes and FLOPs at the device's
measured ceilings (0 means on the roofline).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.profiler import counters as C
from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.occupancy import theoretical
from pipeline.profiler.report import Ceilings, Classification, Evidence, KernelProfile, bytes_text, time_text

BOUND_PCT = 60.0  # a unit at or above this share of its peak names the bound
IDLE_PCT = 40.0  # both below this: latency or occupancy
TINY_KERNEL_US = 10.0  # launch overhead (~3-5 us) is then a large part of the kernel's time
MANY_LAUNCHES = 10  # launches per forward call above which tiny kernels make a candidate launch-bound
LOW_OCCUPANCY_PCT = 50.0  # theoretical occupancy under this is worth naming when no unit is saturated
PREDICTED_LOW_OCCUPANCY_PCT = 25.0  # without counters, only occupancy this low is named as the bound


@dataclass(frozen=True)
class Context:
    """What classification needs beyond one kernel: the device ceilings and the problem's analytic costs."""

    ceilings: Ceilings
    costs: ProblemCosts | None = None

    @property
    def sms(self) -> int:
        return self.ceilings.sms

    def precision(self, tensor_cores: bool) -> str:
        """The matmul ceiling that applies: bf16 for half inputs, tf32 for fp32 on tensor cores, else fp32."""
        dtypes = set(self.costs.dtypes) if self.costs else set()
        if dtypes & {"float16", "bfloat16"}:
            return "bf16"
        return "tf32" if tensor_cores else "fp32"

    def floor_ms(self, tensor_cores: bool) -> float | None:
        if self.costs is None:
            return None
        return self.costs.floor_ms(self.ceilings.copy_bytes_per_s, self.ceilings.compute_flops_per_s(self.precision(tensor_cores)))

    def ridge(self, tensor_cores: bool) -> float:
        """FLOP per byte above which the problem is compute-bound on this device."""
        return self.ceilings.compute_flops_per_s(self.precision(tensor_cores)) / self.ceilings.copy_bytes_per_s


def _pct(value: float) -> str:
    return f"{value:.1f}%"


def _distance(floor: float | None, actual: float | None) -> float | None:
    """Percent by which `actual` is above the roofline `floor` (same units); 0 on the roofline."""
    if not floor or not actual:
        return None
    return round(max(0.0, 100.0 * (1.0 - floor / actual)), 1)


# Kernels with counters --------------------------------------------------------------------------------------------


def classify_kernel(k: KernelProfile, ctx: Context) -> Classification:
    """Classify one kernel from its NCU counters (falls back to `predict_kernel` when the SOL metrics are absent)."""
    mem, sm = k.memory_throughput_pct, k.sm_throughput_pct
    if mem is None or sm is None:
        return predict_kernel(k, ctx)
    sol = [
        Evidence(C.MEMORY_PCT, round(mem, 1), f"memory side at {_pct(mem)} of its peak (DRAM/L2/L1, whichever is busiest)"),
        Evidence(C.SM_PCT, round(sm, 1), f"compute side at {_pct(sm)} of its peak"),
    ]
    if max(mem, sm) >= BOUND_PCT:
        return _saturated(k, ctx, mem, sm, sol)
    launch = launch_evidence(k, ctx)
    if launch:
        return _result(k, ctx, "launch_bound", launch + sol, "launch-bound: " + launch[0].meaning)
    occupancy = occupancy_evidence(k)
    if occupancy:
        kind, evidence = occupancy
        return _result(k, ctx, kind, evidence + sol, f"too few warps resident ({evidence[0].meaning}); no unit is saturated")
    if max(mem, sm) < IDLE_PCT:
        stalls = stall_evidence(k)
        why = stalls[0].meaning if stalls else "no stall data"
        return _result(k, ctx, "latency_bound", sol + stalls, f"latency-bound: both units under {IDLE_PCT:.0f}%; dominant stall: {why}")
    kind = "memory_bound" if mem >= sm else _compute_kind(k)
    note = Evidence("sol_band", f"{max(mem, sm):.1f}%", f"between {IDLE_PCT:.0f}% and {BOUND_PCT:.0f}%: the bound is named, but not saturated")
    return _result(k, ctx, kind, sol + [note] + stall_evidence(k)[:1], f"leaning {kind.replace('_', '-')} (busiest unit at {max(mem, sm):.0f}%)")


def _saturated(k: KernelProfile, ctx: Context, mem: float, sm: float, sol: list[Evidence]) -> Classification:
    if mem >= sm:
        extra = [e for e in (_bandwidth_evidence(k, ctx), _coalescing_evidence(k)) if e]
        return _result(k, ctx, "memory_bound", sol + extra, f"memory-bound: memory side at {mem:.0f}% of peak")
    kind = _compute_kind(k)
    pipes = [
        Evidence(name, round(value, 1), meaning)
        for name, value, meaning in (
            (C.TENSOR_PCT, k.tensor_pipe_pct, "tensor-core pipe busy"),
            (C.FMA_PCT, k.fma_pipe_pct, "FP32 FMA pipe busy"),
            (C.GMMA_INSTS, k.metrics.get(C.GMMA_INSTS), "wgmma instructions issued (Hopper tensor cores)"),
        )
        if value is not None
    ]
    return _result(k, ctx, kind, sol + pipes, f"{kind.replace('_', '-')}: compute side at {sm:.0f}% of peak")


def _compute_kind(k: KernelProfile) -> str:
    tensor, fma = k.tensor_pipe_pct or 0.0, k.fma_pipe_pct or 0.0
    gmma = k.metrics.get(C.GMMA_INSTS, 0.0) > 0 or (k.static is not None and k.static.uses_wgmma)
    return "compute_bound_tensor" if tensor >= fma and (tensor > 0 or gmma) or (gmma and fma < BOUND_PCT) else "compute_bound_fma"


def _result(k: KernelProfile, ctx: Context, kind: str, evidence: list[Evidence], summary: str) -> Classification:
    distance, floor_evidence = kernel_distance(k, ctx, kind)
    return Classification(kind, distance, tuple(evidence + floor_evidence), summary)


def kernel_distance(k: KernelProfile, ctx: Context, kind: str) -> tuple[float | None, list[Evidence]]:
    """Distance to the roofline from the kernel's own DRAM bytes and FLOPs (tensor-bound: the tensor pipe's idle share)."""
    if kind == "compute_bound_tensor":
        busy, metric = (k.tensor_pipe_pct, C.TENSOR_PCT) if k.tensor_pipe_pct else (k.sm_throughput_pct, C.SM_PCT)
        if busy is not None:
            return round(max(0.0, 100.0 - busy), 1), [Evidence(metric, round(busy, 1), "the tensor cores' roofline is this unit's peak")]
    if k.duration_ms is None or k.dram_bytes is None:
        return None, []
    bw = ctx.ceilings.copy_bytes_per_s
    floor_s = max(k.dram_bytes / bw, (k.flops or 0.0) / ctx.ceilings.compute_flops_per_s("fp32"))
    distance = _distance(floor_s, k.duration_ms * 1e-3)
    meaning = f"roofline floor {floor_s * 1e3:.4f} ms for its DRAM bytes and FMA FLOPs at this device's ceilings"
    return distance, [Evidence("roofline_floor_ms", round(floor_s * 1e3, 6), meaning)]


def _bandwidth_evidence(k: KernelProfile, ctx: Context) -> Evidence | None:
    if k.achieved_bw_bytes_per_s is None:
        return None
    share = 100.0 * k.achieved_bw_bytes_per_s / ctx.ceilings.copy_bytes_per_s
    return Evidence("achieved_bw_pct_of_copy", round(share, 1), f"{k.achieved_bw_bytes_per_s / 1e12:.2f} TB/s of DRAM traffic, {_pct(share)} of the measured copy bandwidth")


def _coalescing_evidence(k: KernelProfile) -> Evidence | None:
    if k.coalescing_pct is None or k.coalescing_pct >= 80:
        return None
    return Evidence(C.COALESCING, round(k.coalescing_pct, 1), "global loads use only this share of each 32-byte sector: uncoalesced or strided access wastes bandwidth")


def launch_evidence(k: KernelProfile, ctx: Context) -> list[Evidence]:
    """Launch-bound symptoms: a tiny kernel, or fewer blocks than SMs."""
    evidence = []
    if k.mean_duration_us is not None and k.mean_duration_us < TINY_KERNEL_US:
        evidence.append(Evidence(C.DURATION, round(k.mean_duration_us, 2), f"{k.mean_duration_us:.1f} us per launch: launch overhead (~3-5 us) is a large part of it"))
    if k.blocks is not None and k.blocks < ctx.sms:
        idle = ctx.sms - k.blocks
        evidence.append(Evidence(C.GRID_SIZE, k.blocks, f"{k.blocks} blocks for {ctx.sms} SMs: {idle} SMs get no work"))
    return evidence


def occupancy_evidence(k: KernelProfile) -> tuple[str, list[Evidence]] | None:
    """(kind, evidence) when registers or shared memory keep theoretical occupancy low."""
    if k.theoretical_occupancy_pct is None or k.theoretical_occupancy_pct >= LOW_OCCUPANCY_PCT:
        return None
    if k.occupancy_limiter not in ("registers", "shared_memory"):
        return None
    kind = "occupancy_limited_registers" if k.occupancy_limiter == "registers" else "occupancy_limited_shared"
    evidence = [Evidence(C.THEORETICAL_OCC, round(k.theoretical_occupancy_pct, 1), f"theoretical occupancy {_pct(k.theoretical_occupancy_pct)}, limited by {k.occupancy_limiter.replace('_', ' ')}")]
    if k.occupancy_limiter == "registers" and k.registers_per_thread is not None:
        evidence.append(Evidence(C.REGISTERS, k.registers_per_thread, f"{k.registers_per_thread} registers per thread"))
    if k.occupancy_limiter == "shared_memory" and k.shared_bytes_per_block is not None:
        # Dynamic + static: NCU's launch__shared_mem_per_block also counts the driver's reserved 1 KiB.
        meaning = f"{k.shared_bytes_per_block:,} B of shared memory per block (plus the 1 KiB the driver reserves)"
        evidence.append(Evidence("shared_bytes_per_block", k.shared_bytes_per_block, meaning))
    if k.achieved_occupancy_pct is not None:
        evidence.append(Evidence(C.ACHIEVED_OCC, round(k.achieved_occupancy_pct, 1), f"achieved occupancy {_pct(k.achieved_occupancy_pct)}"))
    return kind, evidence


def stall_evidence(k: KernelProfile) -> list[Evidence]:
    return [
        Evidence(f"{C.STALL_PREFIX}{reason}{C.STALL_SUFFIX}", value, C.STALL_MEANING.get(reason, reason))
        for reason, value in list(k.stalls.items())[:2]
    ]


# Kernels without counters -----------------------------------------------------------------------------------------


def predict_kernel(k: KernelProfile, ctx: Context, *, single: bool = False) -> Classification:
    """Classify from the grid, compiled resources and the problem's roofline: no counters. `single`: this kernel is
    the candidate's only one, so the problem's floor is its floor."""
    k = with_theoretical_occupancy(k, ctx.sms)
    tensor = k.static is not None and k.static.uses_wgmma
    floor = ctx.floor_ms(tensor) if single else None
    distance = _distance(floor, k.duration_ms)
    launch = launch_evidence(k, ctx)
    if launch:
        return Classification("launch_bound", distance, tuple(launch), "launch-bound: " + launch[0].meaning, predicted=True)
    occupancy = occupancy_evidence(k)
    if occupancy and k.theoretical_occupancy_pct <= PREDICTED_LOW_OCCUPANCY_PCT:
        kind, evidence = occupancy
        return Classification(kind, distance, tuple(evidence + static_evidence(k)), f"predicted {kind.replace('_', ' ')}: {evidence[0].meaning}", predicted=True)
    notes = (occupancy[1][:1] if occupancy else []) + static_evidence(k)
    if distance is not None and distance > 100.0 - IDLE_PCT:
        floor_ev = Evidence("roofline_floor_ms", round(floor, 6), f"the problem's floor is {100 - distance:.0f}% of this kernel's time: far from any roofline")
        return Classification("latency_bound", distance, (floor_ev, *notes), "likely latency-bound: far from the floor, no resource limit visible (no counters)", predicted=True)
    kind, evidence = intensity_kind(ctx, tensor)
    return Classification(kind, distance, tuple(evidence + notes), f"predicted {kind.replace('_', '-')} from the problem's arithmetic intensity", predicted=True)


def intensity_kind(ctx: Context, tensor: bool) -> tuple[str, list[Evidence]]:
    """Memory- or compute-bound by the problem's FLOP/byte against the device's ridge point."""
    if ctx.costs is None:
        return "memory_bound", [Evidence("arithmetic_intensity", "unknown", "the problem's costs are unknown; assumed memory-bound")]
    intensity, ridge = ctx.costs.intensity(), ctx.ridge(tensor)
    kind = "memory_bound" if intensity < ridge else ("compute_bound_tensor" if tensor else "compute_bound_fma")
    meaning = f"{intensity:.1f} FLOP/B at the floor against a ridge of {ridge:.1f} FLOP/B ({ctx.precision(tensor)})"
    return kind, [Evidence("arithmetic_intensity", round(intensity, 3), meaning)]


def static_evidence(k: KernelProfile) -> list[Evidence]:
    if k.static is None:
        return []
    s, evidence = k.static, []
    if s.spilled_bytes:
        evidence.append(Evidence("static.spilled_bytes", s.spilled_bytes, f"{s.spilled_bytes} B per thread spilled to local memory at {s.registers} registers"))
    if s.launch_problems() and not s.spilled_bytes:
        evidence.append(Evidence("static.launch", s.launch_problems()[0], "this configuration cannot launch on an H200"))
    return evidence


def with_theoretical_occupancy(k: KernelProfile, sms: int) -> KernelProfile:
    """Fill theoretical occupancy, its limiter and waves from registers, shared memory and block size if missing."""
    if k.theoretical_occupancy_pct is not None or k.registers_per_thread is None or not k.threads_per_block:
        return k
    occ = theoretical(-(-k.threads_per_block // 32), k.registers_per_thread, k.shared_bytes_per_block or 0)
    waves = round(occ.waves(k.blocks, sms), 3) if k.blocks else None
    return replace(k, theoretical_occupancy_pct=occ.occupancy_pct, occupancy_limiter=occ.limiter, waves=k.waves if k.waves is not None else waves)


# The whole candidate ----------------------------------------------------------------------------------------------


def classify_candidate(kernels: list[KernelProfile], ctx: Context, *, forward_launches: int | None = None) -> Classification | None:
    """The candidate's bound: launch-bound when many launches are mostly tiny, else the kind of kernel that takes
    most of the time (without times: most of the launched threads). Each kernel must carry its classification."""
    if not kernels:
        return None
    launches = forward_launches if forward_launches is not None else sum(k.calls for k in kernels)
    timed = all(k.duration_ms is not None for k in kernels)
    tensor = any(uses_tensor_cores(k) for k in kernels)
    total_ms = sum(k.duration_ms for k in kernels) if timed else None
    floor_ms = ctx.floor_ms(tensor)
    distance = _distance(floor_ms, total_ms)
    floor = floor_evidence(ctx, tensor, total_ms)
    predicted = not timed or all(k.classification is None or k.classification.predicted for k in kernels)
    many = many_tiny_evidence(kernels, launches, timed)
    if many:
        return Classification("launch_bound", distance, tuple(many + floor), "launch-bound: " + many[0].meaning, predicted)
    weights = {id(k): (k.duration_ms if timed else (k.blocks or 1) * (k.threads_per_block or 1) * max(k.calls, 1)) for k in kernels}
    dominant = max(kernels, key=lambda k: weights[id(k)])
    share = 100.0 * weights[id(dominant)] / (sum(weights.values()) or 1.0)
    cls = dominant.classification or predict_kernel(dominant, ctx)
    what = "time" if timed else "launched threads"
    lead = Evidence("dominant_kernel", dominant.name, f"{dominant.name}: {share:.0f}% of the {what}, {cls.kind.replace('_', '-')}")
    summary = f"{dominant.name} ({share:.0f}% of the {what}): {cls.summary}"
    return Classification(cls.kind, distance, (lead, *cls.evidence[:3], *floor), summary, predicted)


def uses_tensor_cores(k: KernelProfile) -> bool:
    return (k.static is not None and k.static.uses_wgmma) or (k.tensor_pipe_pct or 0.0) > 5.0 or k.metrics.get(C.GMMA_INSTS, 0.0) > 0


def many_tiny_evidence(kernels: list[KernelProfile], launches: int, timed: bool) -> list[Evidence]:
    """Evidence that the candidate is many small launches (with times: mostly tiny ones)."""
    if launches < MANY_LAUNCHES:
        return []
    evidence = [Evidence("launches_per_call", launches, f"{launches} kernel launches per forward call")]
    if not timed:
        return evidence
    total = sum(k.duration_ms for k in kernels) or 1.0
    tiny = [k for k in kernels if (k.mean_duration_us or 0.0) < TINY_KERNEL_US]
    tiny_share = 100.0 * sum(k.duration_ms for k in tiny) / total
    if tiny_share < 50.0:
        return []
    mean_us = 1e3 * total / max(launches, 1)
    evidence.append(Evidence("tiny_kernel_time_pct", round(tiny_share, 1), f"{tiny_share:.0f}% of kernel time is in launches under {TINY_KERNEL_US:.0f} us (mean {mean_us:.1f} us): fuse them"))
    return evidence


def floor_evidence(ctx: Context, tensor: bool, total_ms: float | None) -> list[Evidence]:
    """The analytic floor of the problem and what it is made of."""
    floor_ms = ctx.floor_ms(tensor)
    if floor_ms is None or ctx.costs is None:
        return []
    c, precision = ctx.ceilings, ctx.precision(tensor)
    made_of = (
        f"{bytes_text(ctx.costs.min_bytes)} at {c.copy_bytes_per_s / 1e12:.2f} TB/s, "
        f"{ctx.costs.flops / 1e9:.4g} GFLOP at {c.compute_flops_per_s(precision) / 1e12:.0f} TFLOP/s ({precision}); {c.source} ceilings"
    )
    evidence = [Evidence("analytic_floor_ms", floor_ms, f"no implementation can beat {time_text(floor_ms)}: {made_of}")]
    if total_ms:
        evidence.append(Evidence("kernel_time_ms", total_ms, f"{time_text(total_ms)} of kernel time: {100 * floor_ms / total_ms:.0f}% of the floor's speed"))
    return evidence


def classify_profiles(kernels: list[KernelProfile], ctx: Context, *, counters: bool, forward_launches: int | None = None) -> tuple[list[KernelProfile], Classification | None]:
    """Classify every kernel (from counters, or predicted) and then the candidate."""
    single = len({k.name for k in kernels}) == 1
    if counters:
        classified = [replace(k, classification=classify_kernel(k, ctx)) for k in kernels]
    else:
        kernels = [with_theoretical_occupancy(k, ctx.sms) for k in kernels]
        classified = [replace(k, classification=predict_kernel(k, ctx, single=single)) for k in kernels]
    return classified, classify_candidate(classified, ctx, forward_launches=forward_launches)
