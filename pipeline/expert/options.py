"""The lowering choices one candidate was made with. They travel in the candidate's first line (pipeline.expert.
record), so a later call that only sees the kernel's source can make a structural variant of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Options:
    paradigm: str = "fused_triton"  # the seed's name (pipeline.expert.seeds)
    gemm: str = "triton"  # triton: a Triton GEMM with the epilogue fused; library: torch.matmul + a Triton epilogue
    conv: str = "triton"  # triton: an implicit-GEMM Triton convolution; library: torch's convolution
    precision: str = "planned"  # tl.dot on fp32: planned (pipeline.expert.precision: the error model's choice for the
    # tolerance), or a scheme as given: ieee (exact fp32 FMA), tf32x3 (three TF32 passes), tf32
    reduction: str = "auto"  # auto: rows held in registers when they fit, else looped; looped: always looped
    split: bool = False  # long reductions over too few rows to fill the GPU: partials by many programs, then a combine
    algebra: bool = False  # exact algebraic rewrites (pipeline.expert.algebra)
    group_m: int = 8  # GEMM: programs grouped along M so neighbours share tiles in L2 (1: row-major order)
    split_k: int = 1  # GEMM: at most this many K slices for GEMMs too small to fill the GPU, summed by a second kernel
    gemm_tile: tuple[int, int, int] | None = None  # GEMM (BLOCK_M, BLOCK_N, BLOCK_K); None: chosen from the shapes
    num_stages: int | None = None  # GEMM/conv software pipelining depth; None: chosen from the tile
    persistent: bool = False  # GEMM: one program per SM walks the output tiles in a loop (no tail wave)
    vector: int | None = None  # pointwise kernels: elements per thread (num_warps = XBLOCK / (32 * vector)); None: 8
    row_block: int | None = None  # row kernels: RBLOCK of looped reductions (or XBLOCK of pointwise kernels)
    wide_index: bool = False  # 64-bit index arithmetic (a repair for offsets past 2**31)
    pins: tuple[tuple[str, str, int], ...] = ()  # a reviewer's bounds on launch values, e.g. ("XBLOCK", ">", 1)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        defaults = dataclasses.asdict(Options())
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items() if v != defaults[k] or k == "paradigm"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Options:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known}
        if "pins" in values:
            values["pins"] = tuple((str(n), str(op), int(v)) for n, op, v in values["pins"])
        return cls(**values)

    def but(self, **changes: Any) -> Options:
        return dataclasses.replace(self, **changes)
