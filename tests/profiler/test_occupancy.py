"""Theoretical occupancy on an sm_90 SM (CUDA's occupancy rules)."""

from __future__ import annotations

import pytest

from pipeline.profiler.occupancy import theoretical


@pytest.mark.parametrize(
    ("warps", "registers", "shared", "blocks", "limiter", "pct"),
    [(4, 32, 0, 16, "warps", 100.0),  # 16 blocks x 4 warps = the 64-warp maximum
     (4, 95, 1040, 5, "registers", 31.2),  # 3072 registers per warp: 21 warps, 5 blocks of 4
     (1, 156, 1536, 12, "registers", 18.8),
     (8, 204, 148_480, 1, "registers", 12.5),  # 6656 registers per warp: 9 warps, 1 block of 8; shared allows 1 too
     (4, 32, 100_000, 2, "shared_memory", 12.5),
     (1, 16, 0, 32, "blocks", 50.0),  # 1-warp blocks hit the 32-blocks-per-SM limit
     (4, 32, 240_000, 0, "shared_memory", 0.0)],  # over the per-block limit: cannot launch
)  # fmt: skip
def test_theoretical_occupancy_and_its_limiter(warps, registers, shared, blocks, limiter, pct):
    occ = theoretical(warps, registers, shared)
    assert occ.blocks_per_sm == blocks and occ.limiter == limiter
    assert occ.occupancy_pct == pytest.approx(pct, abs=0.1)


def test_waves_count_how_many_times_the_grid_fills_every_sm():
    occ = theoretical(4, 95, 1040)
    assert occ.waves(65536, 132) == pytest.approx(65536 / (5 * 132))
