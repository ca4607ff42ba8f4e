"""Stage 1's seeds: structurally different lowerings of the same problem (multi-seed search), in a fixed order.

Each paradigm is a set of lowering options; the backend offers them in this order, skipping one that the judge's
delegation rule would ban and one whose source would repeat an earlier seed's (a problem with no GEMM has no
library-GEMM paradigm of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.expert.lowering import Lowered, Lowering
from pipeline.expert.options import Options


@dataclass(frozen=True)
class Paradigm:
    name: str
    why: str
    options: Options


PARADIGMS = (
    Paradigm("fused_triton", "every GEMM and convolution as a Triton kernel with its epilogue fused (fp32 dots in "
             "the scheme the error model plans for the tolerance: exact at 1e-4), every reduction fused with the pointwise work around it, rows held in "
             "registers where they fit, long reductions over few rows split into partials and a combine",
             Options(paradigm="fused_triton", split=True)),
    Paradigm("library_core", "GEMMs and convolutions kept in cuBLAS/cuDNN (exact fp32), everything around them fused "
             "into Triton kernels: the library's tuned core plus one pass for the rest",
             Options(paradigm="library_core", gemm="library", conv="library", split=True)),
    Paradigm("streaming_exact", "reductions streamed through the rows in chunks (one pass per level, any row length) "
             "and Triton GEMMs in exact fp32 FMA (input_precision ieee)",
             Options(paradigm="streaming_exact", reduction="looped", precision="ieee")),
    Paradigm("library_streaming", "library GEMMs and convolutions with the surrounding reductions streamed in chunks",
             Options(paradigm="library_streaming", gemm="library", conv="library", reduction="looped")),
)


@dataclass(frozen=True)
class SeedChoice:
    paradigm: Paradigm
    lowered: Lowered
    skipped: tuple[str, ...]  # paradigms passed over on the way, with the reason


def alternatives(lowering: Lowering) -> tuple[list[SeedChoice], list[str]]:
    """Every usable, distinct seed in order, and why the others were passed over."""
    found: list[SeedChoice] = []
    notes: list[str] = []
    seen: set[str] = set()
    for paradigm in PARADIGMS:
        try:
            lowered = lowering.lower(paradigm.options)
        except ValueError as error:  # nothing to launch: every op stays in torch
            notes.append(f"{paradigm.name}: {error}")
            continue
        if lowering.delegates(lowered):
            notes.append(f"{paradigm.name}: would leave every compute op of the reference in torch ({', '.join(sorted(lowering.ref_ops))})")
            continue
        body = lowered.source.split("\n", 1)[1]  # the record line names the paradigm; the code is what must differ
        body = body.replace(paradigm.name, "")
        if body in seen:
            notes.append(f"{paradigm.name}: the same kernels as an earlier seed for this problem")
            continue
        seen.add(body)
        found.append(SeedChoice(paradigm, lowered, tuple(notes)))
    return found, notes
