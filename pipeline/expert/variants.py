"""Stage 2's Code role by rules: the diagnosed fixes mapped onto structural variants of the kernel's template, and
the numbers handed to the tuning engine.

Each variant belongs to one sub-stage and changes one structural choice:
- parallel mapping: split-K (output tiles that leave SMs idle), grouped tile order (swizzle) on or off, a
  persistent grid (one program per SM looping over the tiles);
- tiling: a larger or smaller GEMM tile, rows held in registers or streamed in chunks;
- memory: deeper or shallower software pipelining (num_stages), longer chunks of a streamed row, the vector width
  of pointwise kernels (elements per thread).
The bottleneck the Profile role named decides the order in which they are offered; a rejected proposal moves to
the next. The tunables returned with a variant are those of the kernel that moves the most bytes (or FLOPs), for
this sub-stage's knobs, so the tuning engine searches the numbers while the rules choose the structure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.agents.replies import Diagnosis
from pipeline.expert.algebra import split_k_slices
from pipeline.expert.fusion import Kernel
from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options

H200_SMS = 132

STAGE_KNOBS = {
    "parallel_mapping": ("GROUP_M", "XBLOCK"),
    "tiling": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "RBLOCK", "XBLOCK"),
    "memory": ("num_stages", "num_warps", "RBLOCK", "XBLOCK"),
}


@dataclass(frozen=True)
class Facts:
    """What the variants need to know about the lowered problem."""

    gemms: tuple[tuple[int, int, int, str], ...]  # (M, N, K, dtype) of each Triton GEMM/conv kernel
    persistent_rows: bool  # some row kernel holds its rows in registers
    looped_rows: bool  # some row kernel streams its rows
    pointwise: bool = False  # some kernel is pointwise (nothing reduced) and large enough to fill a block
    matmuls: tuple[tuple[int, int, int, str], ...] = ()  # the GEMM kernels alone (the convolution template has no persistent grid)


@dataclass(frozen=True)
class Variant:
    name: str
    stage: str
    why: str
    make: Callable[[Options, Facts], Options | None]  # None: does not apply
    favoured_by: tuple[str, ...] = ()  # bottleneck kinds that put it first
    target: str = "gemm"  # the kernels it changes (gemm: GEMMs and convolutions; row: row kernels), whose numbers are tuned
    topics: frozenset[str] = frozenset()  # the words of a plan's fix or a reviewer's feedback that name it (steering)


def facts(lowering: Lowering, options: Options) -> Facts:
    lowered = lowering.lower(options)
    from pipeline.expert.rowkernel import RowKernel

    gemms, matmuls, persistent, looped, pointwise = [], [], False, False, False
    for k in lowered.schedule.kernels():
        if k.kind in ("gemm", "conv"):
            gemms.append(_gemm_shape(k, lowered.schedule.graph))
            if k.kind == "gemm":
                matmuls.append(gemms[-1])
            continue
        if k.kind == "scan":
            looped = True  # walked in RBLOCK chunks, as a looped row kernel is
            continue
        row = RowKernel(k, lowered.schedule.graph, options, "probe", {}, {})
        persistent |= row.config.mode == "persistent"
        looped |= row.config.mode == "looped"
        pointwise |= row.config.mode == "pointwise" and row.xnumel >= 4096
    return Facts(tuple(gemms), persistent, looped, pointwise, tuple(matmuls))


def _gemm_shape(k: Kernel, graph) -> tuple[int, int, int, str]:
    anchor = graph.node(k.anchor)
    first = graph.node(anchor.args[0].id)
    if k.kind == "gemm":
        return anchor.shape[-2], anchor.shape[-1], first.shape[-1], first.dtype
    weight = graph.node(anchor.args[1].id)
    batch, cout, oh, ow = anchor.shape
    return batch * oh * ow, cout, weight.shape[1] * weight.shape[2] * weight.shape[3], first.dtype


def _split_k(options: Options, f: Facts) -> Options | None:
    if options.split_k > 1 or options.gemm != "triton":
        return None
    if not any(split_k_slices(m, n, k) > 1 for m, n, k, _ in f.gemms):
        return None
    return options.but(split_k=16)


def _swizzle(options: Options, f: Facts) -> Options | None:
    if not f.gemms:
        return None
    return options.but(group_m=1 if options.group_m > 1 else 8)


def _persistent(options: Options, f: Facts) -> Options | None:
    """Only where a GEMM has more output tiles than the H200 has SMs (else the grid is one wave already)."""
    if options.persistent or options.gemm != "triton" or not f.matmuls:
        return None
    from pipeline.expert.gemm import default_tile

    def tiles(m: int, n: int, k: int, dtype: str) -> int:
        bm, bn, _, _, _ = default_tile(m, n, k, dtype, options.precision)
        if options.gemm_tile:
            bm, bn = options.gemm_tile[:2]
        return -(-m // bm) * -(-n // bn)

    return options.but(persistent=True) if any(tiles(*g) > H200_SMS for g in f.matmuls) else None


def _vector(options: Options, f: Facts) -> Options | None:
    """Pointwise kernels: 8 elements per thread by default; 4 (one 16-byte fp32 access, more threads in flight) is
    offered first, then 16 (more bytes in flight per thread)."""
    if not f.pointwise:
        return None
    return options.but(vector=4 if (options.vector or 8) > 4 else 16)


def _tile(bigger: bool) -> Callable[[Options, Facts], Options | None]:
    def make(options: Options, f: Facts) -> Options | None:
        if not f.gemms:
            return None
        from pipeline.expert.gemm import SHARED_LIMIT_BYTES, default_tile, shared_bytes, tile_ladder
        from pipeline.expert.precision import scheme_for

        m, n, k, dtype = max(f.gemms, key=lambda g: g[0] * g[1] * g[2])
        ladder = tile_ladder(dtype, scheme_for(options.precision, dtype, k, m * n))
        bm, bn, bk, _, stages = default_tile(m, n, k, dtype, options.precision)
        current = options.gemm_tile or (bm, bn, bk)
        size = current[0] * current[1] * current[2]
        steps = [t for t in ladder if (t[0] * t[1] * t[2] > size if bigger else t[0] * t[1] * t[2] < size)]
        if not steps:
            return None
        tile = steps[0] if bigger else steps[-1]
        if tile[0] > max(16, m) * 2 or shared_bytes(*tile, options.num_stages or stages, dtype) > SHARED_LIMIT_BYTES:
            return None
        return options.but(gemm_tile=tile)

    return make


def _rows(options: Options, f: Facts) -> Options | None:
    if f.persistent_rows and options.reduction != "looped":
        return options.but(reduction="looped")
    if options.reduction == "looped":
        return options.but(reduction="auto")
    return None


def _stages(deeper: bool) -> Callable[[Options, Facts], Options | None]:
    def make(options: Options, f: Facts) -> Options | None:
        if not f.gemms:
            return None
        current = options.num_stages or 3
        stages = current + 1 if deeper else current - 1
        return options.but(num_stages=stages) if 2 <= stages <= 5 else None

    return make


def _chunk(options: Options, f: Facts) -> Options | None:
    if not f.looped_rows:
        return None
    return options.but(row_block=4096 if (options.row_block or 2048) < 4096 else 1024)


VARIANTS = (
    Variant("split_k", "parallel_mapping", "the GEMM's output tiles leave SMs idle: K is split across more programs, and "
            "a second kernel sums the slices with the epilogue", _split_k, ("underfilled_grid", "launch_bound", "latency_bound"), topics=frozenset({"split_k"})),
    Variant("grouped_tile_order", "parallel_mapping", "the order of output tiles decides L2 reuse: grouped (swizzled) "
            "order toggled", _swizzle, ("compute_bound_tensor", "memory_bound"), topics=frozenset({"swizzle"})),
    Variant("persistent_grid", "parallel_mapping", "more output tiles than SMs: one program per SM walks the tiles in "
            "a loop, so no tail wave leaves SMs idle and each program is launched once", _persistent,
            ("launch_bound", "latency_bound", "underfilled_grid"), topics=frozenset({"persistent"})),
    Variant("larger_gemm_tile", "tiling", "more reuse per loaded byte: a wider output tile", _tile(True),
            ("compute_bound_tensor", "memory_bound"), topics=frozenset({"larger_tile"})),
    Variant("smaller_gemm_tile", "tiling", "fewer registers per thread and more programs: a shorter output tile",
            _tile(False), ("occupancy_limited_registers", "latency_bound", "launch_bound"), topics=frozenset({"smaller_tile"})),
    Variant("rows_in_registers_or_streamed", "tiling", "rows held in registers (one pass) or streamed in chunks "
            "(less register pressure, more passes)", _rows, ("occupancy_limited_registers", "latency_bound"), "row", topics=frozenset({"streamed_rows", "rows_in_registers"})),
    Variant("deeper_pipelining", "memory", "one more stage of software pipelining so loads overlap the tensor cores",
            _stages(True), ("memory_bound", "latency_bound", "compute_bound_tensor"), topics=frozenset({"pipelining"})),
    Variant("shallower_pipelining", "memory", "one stage fewer: less shared memory per block, more blocks per SM",
            _stages(False), ("occupancy_limited_shared",), topics=frozenset({"pipelining"})),
    Variant("vector_width", "memory", "each thread's run of contiguous elements in the pointwise kernels: shorter for "
            "more threads in flight, longer for more bytes in flight per thread", _vector,
            ("memory_bound", "latency_bound"), "row", topics=frozenset({"vector"})),
    Variant("longer_row_chunks", "memory", "longer chunks of a streamed row: fewer loop trips, wider loads", _chunk,
            ("memory_bound", "latency_bound"), "row", topics=frozenset({"streamed_rows"})),
)


def ranked(stage: str, diagnosis: Diagnosis | None) -> list[Variant]:
    """The stage's variants, those the diagnosed bottlenecks favour first (in the diagnosis' order)."""
    kinds = [b.name for b in diagnosis.bottlenecks] if diagnosis is not None else []
    own = [v for v in VARIANTS if v.stage == stage]

    def rank(v: Variant) -> tuple[int, int]:
        hits = [kinds.index(k) for k in v.favoured_by if k in kinds]
        return (min(hits) if hits else len(kinds) + 1, own.index(v))

    return sorted(own, key=rank)


def planned(stage: str, diagnosis: Diagnosis | None, avoid: frozenset[str] = frozenset(),
            prefer: frozenset[str] = frozenset()) -> tuple[list[Variant], str]:
    """The stage's variants in the order the plan asks for them, and a note for the rationale. The variants its
    fixes name (pipeline.expert.steering's topics, or a variant's own words) come in the plan's order and no others:
    a fix the reviewer deleted is not tried. A plan whose fixes name no topic at all (a model's free text) is read
    by its bottlenecks' kinds (`ranked`). Topics the reviewer said to avoid are never offered."""
    from pipeline.expert.steering import topics_of

    own = [v for v in VARIANTS if v.stage == stage and not v.topics & avoid]
    called: list[Variant] = []
    unimplemented: list[str] = []
    named = False
    for bottleneck in diagnosis.bottlenecks if diagnosis is not None else []:
        for fix in bottleneck.fixes:
            topics = topics_of(fix.change)
            named |= bool(topics)
            hits = [v for v in own if v.topics & topics or v.why in fix.change]
            called += [v for v in hits if v not in called]
            if not hits:
                unimplemented.append(fix.change.split(" (called for by")[0])
    if not named:
        order, note = [v for v in ranked(stage, diagnosis) if v in own], "no fix in the plan names a rule, so its bottlenecks order them"
    else:
        order = called
        note = f"the plan calls for {', '.join(v.name for v in called)}" if called else f"no {stage} rule implements the plan's fixes"
        if unimplemented and called:
            note += f"; no {stage} rule implements: {'; '.join(unimplemented[:3])}"
        elif unimplemented:
            note += f" ({'; '.join(unimplemented[:3])})"
    order.sort(key=lambda v: not v.topics & prefer)
    return order, note


def tunables_for(stage: str, tunables: tuple[tuple[str, tuple[int, ...]], ...]) -> list[tuple[str, tuple[int, ...]]]:
    """The dominant kernel's tunables for this sub-stage's knobs, always with one compile-time parameter (the
    tuning engine finds the kernel by its constexprs)."""
    knobs = STAGE_KNOBS.get(stage, ())
    chosen = [(n, v) for n, v in tunables if n in knobs and len(v) > 1]
    if not any(n not in ("num_warps", "num_stages") for n, _ in chosen):
        constexpr = next(((n, v) for n, v in tunables if n not in ("num_warps", "num_stages") and len(v) > 1), None)
        if constexpr is not None:
            chosen.insert(0, constexpr)
    return chosen
