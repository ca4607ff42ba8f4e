"""Scan kernels: a cumulative sum or product along one axis (cumsum, cumprod, and either one backwards).

The scanned axis is walked in RBLOCK chunks: each chunk is scanned in registers (`tl.cumsum`, `tl.cumprod`), the
carry from the chunks before it is added (or multiplied) in, and the chunk's last value is the next carry. Rows are
the other axes: along the contiguous axis one row (or a few short ones) per program; across it, XBLOCK neighbouring
rows per program, so each chunk's loads are contiguous along the rows. Values are computed in fp32 registers (fp64
for fp64 inputs) and rounded once, when stored; masked lanes hold the identity (0 or 1), so the last lane of a chunk
holds the running value even past the row's end. A backwards scan reads and writes its chunks from the row's end.
"""

from __future__ import annotations

import math

from pipeline.expert.fusion import Kernel
from pipeline.expert.ir import Graph
from pipeline.expert.options import Options
from pipeline.expert.rowkernel import Emitted, dtype_size, next_pow2
from pipeline.expert.values import TL_DTYPES

IDENTITY = {"sum": "0.0", "prod": "1.0"}


class ScanKernel:
    """Writes one scan kernel and its launcher. `names` gives the loaded and stored nodes their host variable names."""

    def __init__(self, kernel: Kernel, graph: Graph, options: Options, name: str, names: dict[int, str]) -> None:
        self.k, self.graph, self.options, self.name, self.names = kernel, graph, options, name, names
        self.node = graph.node(kernel.anchor)
        self.source = graph.node(self.node.args[0].id)
        shape, axis = self.node.shape, self.node.attr("axis")
        self.outer, self.length, self.inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        self.rows = self.outer * self.inner
        self.rblock, self.xblock, self.num_warps = self._config()

    def _config(self) -> tuple[int, int, int]:
        """(RBLOCK, XBLOCK, num_warps): a chunk of up to 1024 along the contiguous axis, a few rows where they are
        short; across it, 64 rows wide (coalesced) by up to 32 along the scan."""
        if self.inner == 1:
            rblock = self.options.row_block or min(1024, next_pow2(self.length))
            xblock = max(1, min(64, 1024 // rblock, next_pow2(self.rows)))
        else:
            rblock = self.options.row_block or min(32, next_pow2(self.length))
            xblock = min(64, next_pow2(self.rows))
        return rblock, xblock, 8 if rblock * xblock >= 2048 else 4

    def emit(self) -> Emitted:
        return Emitted(self._kernel(), self._launcher(), frozenset(), self.tunables(), self.summary(), self._bytes())

    def _kernel(self) -> str:
        kind, reverse = self.node.fn, self.node.attr("reverse")
        wide = self.node.dtype == "float64"
        acc = "tl.float64" if wide else "tl.float32"
        identity = IDENTITY[kind]
        position = "RNUMEL - 1 - rindex" if reverse else "rindex"
        combine = "+" if kind == "sum" else "*"
        loaded = f"tl.load(x_ptr + base + p * INNER, mask=mask, other={identity}).to({acc})"
        stored = "s" if self.node.dtype == ("float64" if wide else "float32") else f"s.to({TL_DTYPES[self.node.dtype]})"
        order = "from the row's end back" if reverse else "from the row's start"
        lines = [
            "@triton.jit",
            f"def {self.name}_kernel(x_ptr, out_ptr, XNUMEL: tl.constexpr, RNUMEL: tl.constexpr, INNER: tl.constexpr, "
            f"XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):",
            f"    # cumulative {kind} of {self.rows} rows of {self.length}, {order}, in RBLOCK chunks with a carry.",
            "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
            "    xmask = xindex < XNUMEL",
            "    base = (xindex // INNER) * (RNUMEL * INNER) + xindex % INNER",
            "    rbase = tl.arange(0, RBLOCK)[None, :]",
            f"    carry = tl.full([XBLOCK, 1], {identity}, {acc})",
            "    for r0 in range(0, RNUMEL, RBLOCK):",
            "        rindex = r0 + rbase",
            "        mask = xmask & (rindex < RNUMEL)",
            f"        p = {position}",
            f"        s = tl.cum{kind}({loaded}, axis=1) {combine} carry",
            f"        tl.store(out_ptr + base + p * INNER, {stored}, mask=mask)",
            "        carry = tl.sum(tl.where(rbase == RBLOCK - 1, s, 0.0), axis=1, keep_dims=True)",
        ]
        return "\n".join(lines) + "\n"

    def _launcher(self) -> str:
        source, out = self.names[self.source.id], self.names[self.node.id]
        lines = [f"def {self.name}({source}):", f'    """{self.summary()}"""']
        if not _contiguous(self.source.shape, self.source.stride):
            lines.append(f"    {source} = {source}.contiguous()")
        lines.append(f"    {out} = torch.empty({tuple(self.node.shape)}, device={source}.device, dtype=torch.{self.node.dtype})")
        lines.append(f'    {self.name}_kernel[lambda meta: (triton.cdiv({self.rows}, meta["XBLOCK"]),)](')
        lines.append(f"        {source}, {out}, XNUMEL={self.rows}, RNUMEL={self.length}, INNER={self.inner}, "
                     f"XBLOCK={self.xblock}, RBLOCK={self.rblock}, num_warps={self.num_warps})")
        lines.append(f"    return {out}")
        return "\n".join(lines) + "\n"

    def tunables(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        top = next_pow2(self.length)
        if self.inner == 1:
            return (("RBLOCK", tuple(b for b in (256, 512, 1024, 2048, 4096) if b <= max(256, top))), ("num_warps", (2, 4, 8)))
        return (("RBLOCK", tuple(b for b in (8, 16, 32, 64) if b <= max(8, top))), ("num_warps", (4, 8)))

    def summary(self) -> str:
        way = "backwards " if self.node.attr("reverse") else ""
        return (f"Cumulative {self.node.fn} {way}along axis {self.node.attr('axis')} of {list(self.node.shape)}: chunks scanned "
                "in registers, a carry between them (scan kernel).")

    def _bytes(self) -> int:
        return self.source.numel * dtype_size(self.source.dtype) + self.node.numel * dtype_size(self.node.dtype)


def _contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    from pipeline.expert.graph import contiguous_strides

    return all(n == 1 or s == c for n, s, c in zip(shape, stride, contiguous_strides(tuple(shape))))
