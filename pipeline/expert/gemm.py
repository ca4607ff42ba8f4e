"""The Triton GEMM template: C[b] = A[b] @ B[b] with the pointwise work on C fused into the epilogue.

Structure, and why:
- a 2-D grid of output tiles (BLOCK_M x BLOCK_N) per batch element, the tile order grouped GROUP_M tiles along M
  so programs running together reuse the same rows of A and columns of B from L2 (swizzle);
- an fp32 accumulator; fp32 inputs use the scheme pipeline.expert.precision plans for the tolerance at this K
  ("ieee", exact fp32 FMA, at the judge's 1e-4), or the one a variant or a reviewer names ("tf32x3");
- K walked in BLOCK_K steps with num_stages of software pipelining; every load masked at the edges, so any shape is
  correct;
- the epilogue (bias, activation, residual, scale ...) runs on the accumulator in registers: C is written once;
- or, as a variant (Options.persistent), a persistent grid: one program per SM walks the output tiles in a loop
  (tile, tile + NUM_PROGRAMS, ...), so there is no tail wave of half-empty SMs and each program is launched once.
Strides are the captured layouts (a Linear's weight is read transposed in place, never copied).
"""

from __future__ import annotations

import math

from pipeline.expert.fusion import Kernel
from pipeline.expert.indexing import IndexVar, aligned, linear_index
from pipeline.expert.ir import Graph
from pipeline.expert.options import Options
from pipeline.expert.precision import accumulate, scheme_for, why
from pipeline.expert.rowkernel import Emitted, dtype_size, next_pow2, wide_offsets
from pipeline.expert.values import Scope, ValueWriter

SHARED_LIMIT_BYTES = 200 * 1024  # what a tile configuration may use of the H200's 227 KiB per block
# Tiles from small to large, each checked to compile for sm_90 without spills (tests/expert/test_h200_compile.py):
# past 128x128 an fp32 accumulator with tf32x3's split operands no longer fits the registers; exact fp32 FMA (ieee)
# holds two accumulators (each tile summed from zero, then added: pipeline.expert.precision.accumulate) and spills
# at 128x128 (32 bytes with 8 warps), so its largest tile is 64x128, on 8 warps (4 spilled 32 bytes there).
TILE_LADDER = {
    "float32": ((64, 64, 32), (64, 128, 32), (128, 128, 32), (128, 128, 64)),
    "ieee": ((64, 64, 32), (64, 128, 32)),
    "half": ((64, 128, 64), (128, 128, 64), (128, 256, 64)),
}


def tile_ladder(dtype: str, precision: str = "tf32x3") -> tuple[tuple[int, int, int], ...]:
    if dtype in ("float16", "bfloat16"):
        return TILE_LADDER["half"]
    return TILE_LADDER["ieee" if precision == "ieee" else "float32"]


def default_tile(m: int, n: int, k: int, dtype: str, precision: str) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for an H200, clamped to small shapes (tl.dot needs 16)."""
    precision = scheme_for(precision, dtype, k, m * n)
    if dtype in ("float16", "bfloat16"):
        bm, bn, bk, warps, stages = 128, 128, 64, 8, 4
    elif precision == "ieee":
        bm, bn, bk, warps, stages = 64, 128, 32, 8, 3
    else:
        bm, bn, bk, warps, stages = 128, 128, 32, 8, 3
    clamp = lambda block, size: max(16, min(block, next_pow2(size)))  # noqa: E731
    return clamp(bm, m), clamp(bn, n), clamp(bk, k), warps, stages


def shared_bytes(bm: int, bn: int, bk: int, stages: int, dtype: str) -> int:
    """Shared memory of the A and B tiles over the pipeline's stages (what ptxas reports for these kernels on sm_90:
    98,304 B at 128x128x32 fp32 with 3 stages)."""
    return (bm * bk + bk * bn) * dtype_size(dtype) * max(stages, 1)


class GemmKernel:
    def __init__(self, kernel: Kernel, graph: Graph, options: Options, name: str, names: dict[int, str],
                 effects: dict[int, str]) -> None:
        self.k, self.graph, self.options, self.name, self.names, self.effects = kernel, graph, options, name, names, effects
        anchor = graph.node(kernel.anchor)
        self.anchor = anchor
        self.a, self.b = (graph.node(v.id) for v in anchor.args)
        self.domain = anchor.shape
        rank = len(self.domain)
        self.batch = tuple(range(rank - 2))
        self.m, self.n, self.kdim = self.domain[-2], self.domain[-1], self.a.shape[-1]
        self.batch_count = math.prod(self.domain[:-2])
        self.dtype = self.a.dtype
        self.precision = scheme_for(options.precision, self.dtype, self.kdim, self.batch_count * self.m * self.n)
        tile = default_tile(self.m, self.n, self.kdim, self.dtype, self.precision)
        if options.gemm_tile:  # a variant's tile (pipeline.expert.variants' ladder)
            bm, bn, bk = options.gemm_tile
            tile = (bm, bn, bk, 4 if bm * bn < 128 * 128 else 8, tile[4])
        self.bm, self.bn, self.bk, self.warps, stages = tile
        if self.precision == "ieee" and self.bm * self.bn >= 64 * 128:
            self.warps = 8  # exact fp32 FMA's two accumulators spill at 4 warps from 64x128 on
        self.stages = options.num_stages or stages
        variables = [IndexVar("bidx", self.batch, None), IndexVar("mi", (rank - 2,), "mmask"), IndexVar("ni", (rank - 1,), "nmask")]
        self.tile_vars = tuple(variables[1:])
        self.values = ValueWriter(graph, self.domain, variables, set(kernel.nodes), names, {anchor.id: "acc"})

    def _operand_offset(self, node, rows: str, cols: str) -> tuple[str, int, int]:
        """(batch offset expression, row stride, column stride) of an operand broadcast over the output batch."""
        sizes, strides = aligned(node.shape, node.stride, len(self.domain))
        batch = linear_index("bidx", [self.domain[a] for a in self.batch], [strides[a] if sizes[a] > 1 else 0 for a in self.batch])
        return (f" + {batch}" if batch else ""), node.stride[-2], node.stride[-1]

    def emit(self) -> Emitted:
        a_batch, sam, sak = self._operand_offset(self.a, "m", "k")
        b_batch, sbk, sbn = self._operand_offset(self.b, "k", "n")
        wide = self.options.wide_index or wide_offsets([(self.graph.node(i).shape, self.graph.node(i).stride) for i in (*self.k.loads, *self.k.outputs)])
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        head = [
            f"# C[{self.batch_count} x {self.m} x {self.n}] = A @ B over K = {self.kdim}; tiles grouped GROUP_M along M for L2 reuse.",
            "bidx = tl.program_id(1)" + (".to(tl.int64)" if wide else ""),
            "num_m = tl.cdiv(M, BLOCK_M)",
            "num_n = tl.cdiv(N, BLOCK_N)",
        ]
        if self.options.persistent:
            head += ["# persistent grid: this program's tiles are its id, then every NUM_PROGRAMS-th after it",
                     "for tile in range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS):"]
            pid = "tile.to(tl.int64)" if wide else "tile"
        body = [
            f"pid = {pid}",
            "group = GROUP_M * num_n",
            "first_m = (pid // group) * GROUP_M",
            "size_m = tl.minimum(num_m - first_m, GROUP_M)",
            "pid_m = first_m + (pid % group) % size_m",
            "pid_n = (pid % group) // size_m",
            "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
            "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            "rk = tl.arange(0, BLOCK_K)",
            f"a_ptrs = {self.values.ptr(self.a.id)}{a_batch} + rm[:, None] * {sam} + rk[None, :] * {sak}",
            f"b_ptrs = {self.values.ptr(self.b.id)}{b_batch} + rk[:, None] * {sbk} + rn[None, :] * {sbn}",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "for k0 in range(0, K, BLOCK_K):",
            "    a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)",
            "    b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)",
            f"    {accumulate(self.dtype, self.precision)}",
            f"    a_ptrs += BLOCK_K * {sak}",
            f"    b_ptrs += BLOCK_K * {sbk}",
            "# epilogue, on the accumulator in registers",
            "mi = rm[:, None]",
            "ni = rn[None, :]",
            "mmask = mi < M",
            "nmask = ni < N",
        ]
        body += self._epilogue()
        if self.options.persistent:
            body = [f"    {line}" for line in body]
        params = [self.values.ptr(i) for i in self.k.loads] + [self.values.ptr(o) for o in self.k.outputs]
        names = ("M", "N", "K", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M") + (("NUM_PROGRAMS",) if self.options.persistent else ())
        constexprs = [f"{c}: tl.constexpr" for c in names]
        lines = [f"@triton.jit\ndef {self.name}_kernel({', '.join(params + constexprs)}):", *(f"    {line}" for line in head + body)]
        text = "\n".join(lines) + "\n"
        return Emitted(text, self._launcher(), frozenset(self.values.helpers), self.tunables(), self.summary(), self._bytes())

    def _epilogue(self) -> list[str]:
        scope = Scope()
        stores = []
        for o in self.k.outputs:
            value = self.values.value(o, scope)
            stores.append(self.values.store(o, value, spans=self.tile_vars))
        return scope.lines + stores

    def tunables(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Values within the tile ladder (no spills on sm_90), and no larger than the shapes."""
        ladder = tile_ladder(self.dtype, self.precision)
        pick = lambda index, size: tuple(sorted({t[index] for t in ladder if t[index] <= max(16, next_pow2(size))})) or (16,)  # noqa: E731
        return (("BLOCK_M", pick(0, self.m)), ("BLOCK_N", pick(1, self.n)), ("BLOCK_K", pick(2, self.kdim)),
                ("GROUP_M", (1, 4, 8, 16)), ("num_warps", (4, 8)), ("num_stages", (2, 3, 4, 5)))

    def _launcher(self) -> str:
        loads = [self.names[i] for i in self.k.loads]
        device = loads[0]
        lines = [f"def {self.name}({', '.join(loads + [self.effects[o] for o in self.k.outputs if o in self.effects])}):",
                 f'    """{self.summary()}"""']
        for o in self.k.outputs:
            if o not in self.effects:
                node = self.graph.node(o)
                lines.append(f"    {self.names[o]} = torch.empty({tuple(node.shape)}, device={device}.device, dtype=torch.{node.dtype})")
        pointers = ", ".join([*loads, *(self.effects.get(o, self.names[o]) for o in self.k.outputs)])
        tiles = f'triton.cdiv({self.m}, meta["BLOCK_M"]) * triton.cdiv({self.n}, meta["BLOCK_N"])'
        programs = ""
        if self.options.persistent:  # one program per SM (4 under Triton's CPU interpreter), never more than the tiles
            lines.append(f"    programs = torch.cuda.get_device_properties({device}.device).multi_processor_count if {device}.is_cuda else 4")
            tiles, programs = f"min(programs, {tiles})", ", NUM_PROGRAMS=programs"
        lines.append(f"    {self.name}_kernel[lambda meta: ({tiles}, {self.batch_count})](")
        lines.append(f"        {pointers}, M={self.m}, N={self.n}, K={self.kdim},")
        lines.append(f"        BLOCK_M={self.bm}, BLOCK_N={self.bn}, BLOCK_K={self.bk}, GROUP_M={self.options.group_m}{programs}, "
                     f"num_warps={self.warps}, num_stages={self.stages})")
        returned = [self.names[o] for o in self.k.outputs if o not in self.effects]
        lines.append(f"    return {', '.join(returned)}")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        fused = f", {len(self.k.nodes)} epilogue op{'s' if len(self.k.nodes) > 1 else ''} fused" if self.k.nodes else ""
        outputs = self.batch_count * self.m * self.n
        precision = f", fp32 through tl.dot input_precision={why(self.precision, self.kdim, outputs)}" if self.dtype == "float32" else ""
        grid = ", persistent grid (one program per SM)" if self.options.persistent else ""
        return f"Triton GEMM {self.batch_count}x[{self.m}x{self.kdim}]@[{self.kdim}x{self.n}]{fused}{precision}{grid}."

    def _bytes(self) -> int:
        return sum(self.graph.node(i).numel * dtype_size(self.graph.node(i).dtype) for i in (*self.k.loads, *self.k.outputs)) + \
            2 * self.m * self.n * self.kdim * self.batch_count // 64  # FLOPs count too: a GEMM is the kernel to tune
