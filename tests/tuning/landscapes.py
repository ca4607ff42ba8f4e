"""Synthetic tuning landscapes with known optima, measured by the scripted evaluator."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from pipeline.tuning.measurement import TuneStatus
from pipeline.tuning.space import Config, Constraint, IntRange, PowerOfTwo, Space

SHARED_LIMIT_BYTES = 232_448


@dataclass(frozen=True)
class Landscape:
    name: str
    space: Space
    cost: Callable[[Config], "float | TuneStatus"]

    def optimum_ms(self) -> float:
        times = [t for t in map(self.cost, self.space.configs()) if not isinstance(t, TuneStatus)]
        return min(times)


def _gemm_params() -> tuple:
    return (
        PowerOfTwo("BLOCK_M", 16, 256),
        PowerOfTwo("BLOCK_N", 16, 256),
        PowerOfTwo("BLOCK_K", 16, 64),
        PowerOfTwo("num_warps", 2, 8),
        IntRange("num_stages", 2, 4),
    )


def bowl() -> Landscape:
    """A smooth bowl in log2 of every parameter, minimum 1.0 ms at BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, 4 warps,
    3 stages, started from a corner."""
    target = {"BLOCK_M": 7, "BLOCK_N": 6, "BLOCK_K": 5, "num_warps": 2, "num_stages": 3}
    weights = {"BLOCK_M": 0.08, "BLOCK_N": 0.06, "BLOCK_K": 0.05, "num_warps": 0.07, "num_stages": 0.04}

    def cost(config: Config) -> float:
        total = 1.0
        for name, centre in target.items():
            x = config[name] if name == "num_stages" else math.log2(config[name])
            total += weights[name] * (x - centre) ** 2
        return total

    default = Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=2, num_stages=2)
    return Landscape("bowl", Space(_gemm_params(), default=default), cost)


def gemm() -> Landscape:
    """A GEMM-like landscape (M = N = K = 4096 on 132 SMs): compute and memory time per tile, waves of tiles,
    pipelining; the shared-memory constraint removes large tiles with deep pipelines, and tiles whose accumulator
    needs too many registers per thread fail with `spills`."""

    def cost(config: Config) -> "float | TuneStatus":
        bm, bn, bk, warps, stages = (config[n] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))
        if bm * bn / (32 * warps) > 128:
            return TuneStatus.SPILLS
        tiles = math.ceil(4096 / bm) * math.ceil(4096 / bn)
        waves = math.ceil(tiles / 132)
        compute = 2 * bm * bn * 4096 / (warps * 32 * 0.9e3) * (1 + 8 / bk)  # slower per warp when K steps are short
        memory = (bm + bn) * 4096 * 4 / 25e3
        per_tile = max(compute, memory) + min(compute, memory) / (stages - 1) ** 1.5 + 5.0 / warps
        return waves * per_tile / 1e3

    smem = Constraint.expr("shared_memory", f"(BLOCK_M + BLOCK_N) * BLOCK_K * 4 * num_stages <= {SHARED_LIMIT_BYTES}")
    default = Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    return Landscape("gemm", Space(_gemm_params(), (smem,), default), cost)


def deceptive() -> Landscape:
    """A wide basin around the default (best 1.10 ms) and a narrow, better one far away (1.00 ms)."""
    near = {"BLOCK_M": 5, "BLOCK_N": 5, "BLOCK_K": 5, "num_warps": 2, "num_stages": 3}
    far = {"BLOCK_M": 8, "BLOCK_N": 8, "BLOCK_K": 4, "num_warps": 3, "num_stages": 2}

    def distance(config: Config, centre: dict) -> float:
        return sum(((config[n] if n == "num_stages" else math.log2(config[n])) - c) ** 2 for n, c in centre.items())

    def cost(config: Config) -> float:
        return min(1.10 + 0.03 * distance(config, near), 1.00 + 0.06 * distance(config, far))

    default = Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=3)
    return Landscape("deceptive", Space(_gemm_params(), default=default), cost)


LANDSCAPES = {"bowl": bowl, "gemm": gemm, "deceptive": deceptive}
