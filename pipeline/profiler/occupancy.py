"""Theoretical occupancy on an sm_90 SM from registers, shared memory and warps per block (CUDA's own rules).

Used where no counters are read (static facts, torch profiler) to predict what NCU's `launch__occupancy_limit_*`
would say. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.profiler.static import (
    MAX_SHARED_BYTES_PER_BLOCK,
    RESERVED_SHARED_BYTES_PER_BLOCK,
)


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of a Hopper SM (H100/H200)."""

    sms: int = 132
    max_warps: int = 64
    max_blocks: int = 32
    registers: int = 65_536
    register_unit: int = 256  # registers are allocated per warp in units of 256
    shared_bytes: int = 233_472  # 228 KiB usable by blocks
    shared_reserved_per_block: int = RESERVED_SHARED_BYTES_PER_BLOCK  # the driver keeps 1 KiB per block
    shared_unit: int = 128
    max_shared_per_block: int = MAX_SHARED_BYTES_PER_BLOCK


HOPPER = SmLimits()


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel fit on one SM, what stops more, and the resulting warp occupancy."""

    blocks_per_sm: int
    limits: dict[str, int]  # "warps", "registers", "shared_memory", "blocks" -> blocks per SM each allows
    limiter: str  # the key of the smallest limit (a tie goes to "warps", then "blocks", then "registers")
    occupancy_pct: float  # resident warps / maximum warps

    def waves(self, blocks: int, sms: int) -> float:
        """Grid blocks over what all SMs hold at once; below 1 some SMs get nothing to do."""
        per_wave = max(self.blocks_per_sm, 1) * sms
        return blocks / per_wave


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def theoretical(num_warps: int, registers: int, shared_bytes: int, sm: SmLimits = HOPPER) -> Occupancy:
    """Blocks per SM allowed by each resource, for blocks of `num_warps` warps."""
    warps = max(num_warps, 1)
    regs_per_warp = _round_up(max(registers, 1) * 32, sm.register_unit)
    by_registers = (sm.registers // regs_per_warp) // warps
    if shared_bytes > sm.max_shared_per_block:
        by_shared = 0
    elif shared_bytes:
        by_shared = sm.shared_bytes // _round_up(shared_bytes + sm.shared_reserved_per_block, sm.shared_unit)
    else:
        by_shared = sm.max_blocks
    # Ties go to the hardware limits: registers or shared memory limit only when they allow strictly fewer blocks.
    limits = {"warps": sm.max_warps // warps, "blocks": sm.max_blocks, "registers": by_registers, "shared_memory": by_shared}
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return Occupancy(blocks, limits, limiter, round(100.0 * blocks * warps / sm.max_warps, 1))
