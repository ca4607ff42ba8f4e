"""From NCU metric rows (base units) to KernelProfiles: what each counter of our set says about a kernel.

Launches of the same kernel with the same grid and block are merged: times, bytes and FLOPs add up, percentages
are averaged weighted by time. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.profiler.ncu import NcuKernelRow
from pipeline.profiler.report import KernelProfile
from pipeline.profiler.trace import short_name

DURATION = "gpu__time_duration.sum"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
L1_PCT = "l1tex__throughput.avg.pct_of_peak_sustained_active"
L2_PCT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
L2_HIT = "lts__t_sector_hit_rate.pct"
ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
SHARED_DYNAMIC, SHARED_STATIC = "launch__shared_mem_per_block_dynamic", "launch__shared_mem_per_block_static"
LIMIT_REGISTERS, LIMIT_SHARED = "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem"
WAVES = "launch__waves_per_multiprocessor"
GRID_SIZE, BLOCK_SIZE = "launch__grid_size", "launch__block_size"
ISSUE_PCT = "smsp__issue_active.avg.pct_of_peak_sustained_active"
TENSOR_PCT = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
GMMA_INSTS = "sm__inst_executed_pipe_tensor_op_gmma.sum"
FMA_PCT = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
ALU_PCT = "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"
COALESCING = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"
BANK_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
BANK_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
TOP_STALLS = 4
MAX_WARPS_PER_SM, MAX_BLOCKS_PER_SM = 64, 32

# What each stall reason means, for evidence a person (or model) can act on.
STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory loads (L1TEX): latency not hidden",
    "barrier": "waiting at __syncthreads (tl.debug_barrier, reductions): unbalanced work between warps",
    "mio_throttle": "the memory-I/O queue is full (shared memory, special math)",
    "short_scoreboard": "waiting on shared memory or special-function results",
    "math_pipe_throttle": "a math pipe is saturated: compute-bound on that pipe",
    "wait": "fixed-latency dependencies: too little independent work per warp",
    "lg_throttle": "the local/global queue is full: too many small memory instructions (vectorize)",
    "gmma": "waiting on wgmma (tensor-core) results",
    "not_selected": "ready but not picked: plenty of eligible warps (not a problem)",
}


def profiles_from_rows(rows: Iterable[NcuKernelRow]) -> list[KernelProfile]:
    """One KernelProfile per (kernel, grid, block), in order of first launch."""
    groups: dict[tuple, list[NcuKernelRow]] = {}
    for row in rows:
        groups.setdefault((short_name(row.name), row.grid, row.block), []).append(row)
    return [profile_from_metrics(name, grid, block, merge([r.metrics for r in group]), len(group)) for (name, grid, block), group in groups.items()]


def merge(runs: list[dict[str, float]]) -> dict[str, float]:
    """Sums for additive counters (`.sum`, durations), time-weighted means for everything else."""
    if len(runs) == 1:
        return dict(runs[0])
    weights = [r.get(DURATION, 0.0) or 1.0 for r in runs]
    total_weight = sum(weights)
    merged: dict[str, float] = {}
    for name in {n for r in runs for n in r}:
        values = [(r[name], w) for r, w in zip(runs, weights) if name in r]
        if name.endswith(".sum") and not name.startswith("launch__"):
            merged[name] = sum(v for v, _ in values)
        else:
            merged[name] = sum(v * w for v, w in values) / sum(w for _, w in values) if total_weight else values[0][0]
    return merged


def profile_from_metrics(name: str, grid: tuple[int, ...], block: tuple[int, ...], m: dict[str, float], calls: int = 1) -> KernelProfile:
    """Read one kernel's (merged) metrics into a KernelProfile."""
    duration_s = m.get(DURATION)
    dram = _sum(m, DRAM_READ, DRAM_WRITE)
    flops = 2.0 * m[FFMA] if FFMA in m else None
    return KernelProfile(
        name=name,
        calls=calls,
        duration_ms=None if duration_s is None else duration_s * 1e3,
        grid=grid or _flat(m.get(GRID_SIZE)),
        block=block or _flat(m.get(BLOCK_SIZE)),
        dram_bytes=dram,
        achieved_bw_bytes_per_s=_rate(dram, duration_s),
        flops=flops,
        achieved_flops_per_s=_rate(flops, duration_s),
        sm_throughput_pct=m.get(SM_PCT),
        memory_throughput_pct=m.get(MEMORY_PCT),
        dram_throughput_pct=m.get(DRAM_PCT),
        l1_throughput_pct=m.get(L1_PCT),
        l2_throughput_pct=m.get(L2_PCT),
        l2_hit_rate_pct=m.get(L2_HIT),
        achieved_occupancy_pct=m.get(ACHIEVED_OCC),
        theoretical_occupancy_pct=m.get(THEORETICAL_OCC),
        occupancy_limiter=occupancy_limiter(m, block),
        registers_per_thread=_int(m.get(REGISTERS)),
        shared_bytes_per_block=_int(_sum(m, SHARED_DYNAMIC, SHARED_STATIC)),
        waves=m.get(WAVES),
        tensor_pipe_pct=m.get(TENSOR_PCT),
        fma_pipe_pct=m.get(FMA_PCT),
        issue_active_pct=m.get(ISSUE_PCT),
        stalls=top_stalls(m),
        coalescing_pct=m.get(COALESCING),
        shared_bank_conflicts=_sum(m, BANK_LD, BANK_ST),
        metrics=dict(sorted(m.items())),
    )


def occupancy_limiter(m: dict[str, float], block: tuple[int, ...]) -> str | None:
    """Which resource caps blocks per SM: NCU gives the register and shared-memory limits; warps and the hardware
    block limit follow from the block size."""
    limits = {}
    if LIMIT_REGISTERS in m:
        limits["registers"] = m[LIMIT_REGISTERS]
    if LIMIT_SHARED in m:
        limits["shared_memory"] = m[LIMIT_SHARED]
    threads = _product(block) or int(m.get(BLOCK_SIZE, 0))
    if threads:
        limits["warps"] = MAX_WARPS_PER_SM // max(1, -(-threads // 32))
    if not limits:
        return None
    limits["blocks"] = MAX_BLOCKS_PER_SM
    order = ["warps", "blocks", "registers", "shared_memory"]  # ties go to the hardware limits
    return min(limits, key=lambda k: (limits[k], order.index(k)))


def top_stalls(m: dict[str, float], count: int = TOP_STALLS) -> dict[str, float]:
    """The largest stall reasons (warps stalled per issued instruction), largest first."""
    stalls = {
        name[len(STALL_PREFIX) : -len(STALL_SUFFIX)]: value
        for name, value in m.items()
        if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)
    }
    ranked = sorted(stalls.items(), key=lambda kv: -kv[1])[:count]
    return {reason: round(value, 3) for reason, value in ranked}


def _sum(m: dict[str, float], *names: str) -> float | None:
    present = [m[n] for n in names if n in m]
    return sum(present) if present else None


def _rate(amount: float | None, seconds: float | None) -> float | None:
    return amount / seconds if amount is not None and seconds else None


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def _flat(value: float | None) -> tuple[int, ...]:
    return () if value is None else (int(value),)


def _product(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total if dims else 0
