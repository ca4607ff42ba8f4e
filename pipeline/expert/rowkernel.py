"""Row kernels: pointwise chains and reductions with the pointwise work around them, as one Triton kernel.

The kernel walks its domain as rows: `xindex` covers the kept axes, `rindex` the reduced ones. Three shapes of
code, chosen from the sizes:
- pointwise (nothing reduced): a flat 1-D walk, XBLOCK elements per program;
- persistent: a row's reduced elements fit in registers (RBLOCK >= the row), so every value is computed once;
- looped: rows too long for registers are walked in RBLOCK chunks, one pass per level of reduction, and a last pass
  that writes the full-size outputs. A max and the sum of exp(x - max) (softmax, logsumexp) share one pass: the
  sum is rescaled as the running max grows.
Every value is computed in fp32 registers (half-precision inputs are widened as they are loaded) and rounded once,
when it is stored. Reductions mask the lanes past the row's end with their identity (0, -inf, +inf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.expert.fusion import Kernel
from pipeline.expert.graph import contiguous_strides
from pipeline.expert.indexing import IndexVar, aligned, offset
from pipeline.expert.ir import Graph, Node, V
from pipeline.expert.options import Options
from pipeline.expert.values import Scope, ValueWriter

PERSISTENT_MAX = 16384  # longest row held in registers (fp32 elements)
IDENTITY = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "argmax": 'float("-inf")', "argmin": 'float("inf")'}
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Emitted:
    """One kernel as source: the @triton.jit function, its host launcher, what it needs and what can be tuned."""

    kernel: str
    launcher: str
    helpers: frozenset[str]
    tunables: tuple[tuple[str, tuple[int, ...]], ...]
    summary: str
    bytes_moved: int = 0  # the kernel's own reads and writes, to pick the one worth tuning


@dataclass(frozen=True)
class RowConfig:
    mode: str  # pointwise, persistent, looped
    xblock: int
    rblock: int
    num_warps: int


def held_in_registers(rnumel: int, reduces_contiguous: bool, looped: bool = False) -> bool:
    """Are whole rows held in registers (one pass) rather than streamed in chunks? Rows along the contiguous axis
    fit up to PERSISTENT_MAX; rows across it (a column statistic) only when short, since the tile must also be 32
    wide along the contiguous kept axis for its loads to coalesce."""
    if looped:
        return False
    rblock = next_pow2(rnumel)
    return rblock <= PERSISTENT_MAX if reduces_contiguous else rblock <= PERSISTENT_MAX // 64


def reduces_contiguous_axis(shape: tuple[int, ...], stride: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Is the innermost memory axis (the smallest non-zero stride) of a tensor among the reduced axes?"""
    used = [(abs(s), a) for a, (n, s) in enumerate(zip(shape, stride)) if n > 1 and s]
    return not used or min(used)[1] in axes


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def wide_offsets(metas: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> bool:
    """Does any tensor reach past 2**31 elements from its start (int32 offsets would wrap)?"""
    return any(sum((n - 1) * abs(s) for n, s in zip(shape, stride)) >= INT32_LIMIT for shape, stride in metas)


def dtype_size(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 1)


class RowKernel:
    """Writes one row kernel. `names` gives each loaded or stored node its host variable name."""

    def __init__(self, kernel: Kernel, graph: Graph, options: Options, name: str, names: dict[int, str],
                 effects: dict[int, str]) -> None:
        self.k, self.graph, self.options, self.name, self.names, self.effects = kernel, graph, options, name, names, effects
        self.domain = kernel.domain
        raxes = [a for a in kernel.raxes if self.domain[a] > 1]
        kept = [a for a in range(len(self.domain)) if a not in kernel.raxes and self.domain[a] > 1]
        self.xnumel = math.prod(self.domain[a] for a in kept)
        self.rnumel = math.prod(self.domain[a] for a in raxes)
        self.reducing = bool(kernel.raxes)
        self.xvar = IndexVar("xindex", tuple(kept), "xmask")
        self.rvar = IndexVar("rindex", tuple(raxes), "rmask")
        self.members = set(kernel.nodes)
        self.config = self._config()
        self.varies_r: dict[int, bool] = {}
        self.values = ValueWriter(graph, self.domain, self._variables(), self.members, names)

    # configuration ------------------------------------------------------------------------------------------------

    def _config(self) -> RowConfig:
        if not self.reducing:
            block = self.options.row_block or min(1024, next_pow2(self.xnumel))
            if self.options.vector:  # elements per thread: each thread's contiguous run, loaded as 16-byte vectors
                return RowConfig("pointwise", block, 1, max(1, min(16, block // (32 * self.options.vector))))
            return RowConfig("pointwise", block, 1, 4 if block >= 512 else max(1, block // 128))
        rblock = next_pow2(self.rnumel)
        contiguous = self._reduces_contiguous()
        if held_in_registers(self.rnumel, contiguous, self.options.reduction == "looped"):
            floor = 1 if contiguous else min(64, next_pow2(self.xnumel))  # across the contiguous axis: 64 wide to coalesce
            xblock = max(floor, min(max(1, 2048 // rblock), next_pow2(self.xnumel)))
            while xblock > floor and -(-self.xnumel // xblock) < 264:  # keep two programs per SM where the rows allow
                xblock //= 2
            return RowConfig("persistent", xblock, rblock, min(16, next_pow2(max(1, xblock * rblock // 256))))
        if contiguous:
            rblock = self.options.row_block or min(rblock, 2048)
            return RowConfig("looped", 1, rblock, 8 if rblock >= 1024 else 4)
        # The kept axis is the contiguous one: tiles wide along it so loads coalesce, short along the reduction.
        rblock = self.options.row_block or min(rblock, 32)
        return RowConfig("looped", min(64, next_pow2(self.xnumel)), rblock, 4)

    def _reduces_contiguous(self) -> bool:
        """Is the innermost memory axis of the largest tensor read one of the reduced axes?"""
        loads = [self.graph.node(i) for i in self.k.loads]
        if not loads:
            return True
        largest = max(loads, key=lambda n: n.numel)
        sizes, strides = aligned(largest.shape, largest.stride, len(self.domain))
        return reduces_contiguous_axis(sizes, strides, self.rvar.axes)

    def tunables(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        c = self.config
        if c.mode == "pointwise":
            blocks = tuple(b for b in (256, 512, 1024, 2048, 4096) if b <= max(256, next_pow2(self.xnumel)))
            return (("XBLOCK", blocks), ("num_warps", (2, 4, 8)))
        if c.mode == "persistent":
            blocks = tuple(b for b in (1, 2, 4, 8, 16, 32) if b * c.rblock <= PERSISTENT_MAX and b <= next_pow2(self.xnumel))
            return (("XBLOCK", blocks or (1,)), ("num_warps", (2, 4, 8, 16)))
        if c.xblock == 1:
            return (("RBLOCK", tuple(b for b in (512, 1024, 2048, 4096) if b <= next_pow2(self.rnumel)) or (c.rblock,)),
                    ("num_warps", (4, 8, 16)))
        return (("XBLOCK", (32, 64, 128)), ("RBLOCK", (8, 16, 32, 64)), ("num_warps", (4, 8)))

    # roles --------------------------------------------------------------------------------------------------------

    def varies(self, node_id: int) -> bool:
        """Does the value change along the reduced axes (so it must be computed inside the row walk)?"""
        if node_id in self.varies_r:
            return self.varies_r[node_id]
        node = self.graph.node(node_id)
        if node_id in self.members:
            result = node.op != "reduce" and any(self.varies(i) for i in node.inputs)
        elif node.op == "iota":
            result = node.attr("axis") in self.rvar.axes
        else:
            sizes, _ = aligned(node.shape, node.stride, len(self.domain))
            result = any(sizes[a] > 1 for a in self.rvar.axes)
        self.varies_r[node_id] = result
        return result

    def _variables(self) -> list[IndexVar]:
        return [self.xvar, self.rvar] if self.reducing else [self.xvar]

    # values -------------------------------------------------------------------------------------------------------

    def ptr(self, node_id: int) -> str:
        return self.values.ptr(node_id)

    def value(self, node_id: int, scope: Scope) -> str:
        return self.values.value(node_id, scope)

    def _store(self, node_id: int, scope: Scope) -> str:
        node = self.graph.node(node_id)
        _, used = offset(node.shape, contiguous_strides(node.shape), self.domain, self._variables())
        tile = "tl.zeros([XBLOCK, RBLOCK], tl.float32)" if self.reducing and self.rvar in used and not self.varies(node_id) else None
        # the register is at least [XBLOCK, 1] (a row's result), even where the buffer has one element
        spans = (self.xvar, self.rvar) if self.reducing and self.varies(node_id) else (self.xvar,)
        return self.values.store(node_id, f"t{node_id}", tile, spans=spans)

    # reductions ---------------------------------------------------------------------------------------------------

    def _reduce_now(self, node: Node, scope: Scope) -> None:
        """A reduction with the whole row in registers."""
        x = self.value(node.args[0].id, scope)
        masked = f"tl.where(rmask, {x}, {IDENTITY[node.fn]})"
        if node.fn in ("argmax", "argmin"):
            scope.lines.append(f"t{node.id} = tl.{node.fn}({masked}, axis=1, keep_dims=True)")
        else:
            scope.lines.append(f"t{node.id} = tl.{node.fn}({masked}, axis=1, keep_dims=True)")
        scope.defined.add(node.id)

    def _accumulate(self, node: Node, scope: Scope, after: list[str]) -> tuple[str, str]:
        """(initialisation, update inside the loop); `after` receives the lines that finish the reduction."""
        x = self.value(node.args[0].id, scope)
        acc = f"acc{node.id}"
        masked = f"tl.where(xmask & rmask, {x}, {IDENTITY[node.fn]})"
        if node.fn == "sum":
            after.append(f"t{node.id} = tl.sum({acc}, axis=1, keep_dims=True)")
            return f"{acc} = tl.zeros([XBLOCK, RBLOCK], tl.float32)", f"{acc} += {masked}"
        if node.fn in ("max", "min"):
            after.append(f"t{node.id} = tl.{node.fn}({acc}, axis=1, keep_dims=True)")
            return (f"{acc} = tl.full([XBLOCK, RBLOCK], {IDENTITY[node.fn]}, tl.float32)",
                    f"{acc} = tl.{'maximum' if node.fn == 'max' else 'minimum'}({acc}, {masked})")
        # argmax/argmin across chunks, lane by lane as max/min are: each lane of the tile keeps its best value and
        # where it first saw it (strictly better only, so the first wins ties), with no reduction inside the loop;
        # after it, the row's best and the smallest position holding it (the first occurrence, as torch returns).
        # A tl.argmax per chunk instead costs two cross-warp reductions each trip: 1.75x the eager time on the H200.
        better = ">" if node.fn == "argmax" else "<"
        best = "max" if node.fn == "argmax" else "min"
        after.append(f"best{node.id} = tl.{best}({acc}, axis=1, keep_dims=True)")
        after.append(f"t{node.id} = tl.min(tl.where({acc} == best{node.id}, {acc}_index, RNUMEL), axis=1, keep_dims=True)")
        init = f"{acc} = tl.full([XBLOCK, RBLOCK], {IDENTITY[node.fn]}, tl.float32)\n{acc}_index = tl.zeros([XBLOCK, RBLOCK], tl.int32)"
        update = "\n".join((
            f"chunk{node.id} = {masked}",
            f"take{node.id} = chunk{node.id} {better} {acc}",
            f"{acc}_index = tl.where(take{node.id}, rindex, {acc}_index)",
            f"{acc} = tl.where(take{node.id}, chunk{node.id}, {acc})",
        ))
        return init, update

    # the kernel ---------------------------------------------------------------------------------------------------

    def emit(self) -> Emitted:
        body = self._body()
        params = [self.ptr(i) for i in self.k.loads] + [self.ptr(o) for o in self.k.outputs]
        constexprs = ["XNUMEL: tl.constexpr", "XBLOCK: tl.constexpr"] if not self.reducing else \
            ["XNUMEL: tl.constexpr", "RNUMEL: tl.constexpr", "XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
        header = f"@triton.jit\ndef {self.name}_kernel({', '.join(params + constexprs)}):"
        text = "\n".join([header, *(f"    {line}" if line else "" for line in self._comment() + body)]) + "\n"
        return Emitted(text, self._launcher(), frozenset(self.values.helpers), self.tunables(), self.summary(), self._bytes())

    def _comment(self) -> list[str]:
        c = self.config
        if c.mode == "pointwise":
            return [f"# {self.xnumel} elements, XBLOCK per program: one read of each input, one write of each output."]
        kept = [self.domain[a] for a in self.xvar.axes]
        what = (f"each row of {self.rnumel} held in registers (RBLOCK >= {self.rnumel})" if c.mode == "persistent"
                else f"rows of {self.rnumel} walked in RBLOCK chunks, one pass per level of reduction")
        return [f"# domain {list(self.domain)}: {self.xnumel} rows (kept sizes {kept}) x {self.rnumel} reduced, {what}."]

    def _start(self) -> list[str]:
        wide = self.options.wide_index or wide_offsets([(self.graph.node(i).shape, self.graph.node(i).stride) for i in (*self.k.loads, *self.k.outputs)])
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        if not self.reducing:
            return [f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)", "xmask = xindex < XNUMEL"]
        lines = [f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < XNUMEL"]
        if self.config.mode == "persistent":
            lines += ["rindex = tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < RNUMEL"]
        else:
            lines += ["rbase = tl.arange(0, RBLOCK)[None, :]"]
        return lines

    def _body(self) -> list[str]:
        lines = self._start()
        if self.config.mode != "looped":
            scope = Scope()
            for n in self.k.nodes:
                node = self.graph.node(n)
                if node.op == "reduce":
                    self._reduce_now(node, scope)
            for o in self.k.outputs:
                self.value(o, scope) if o not in scope.defined else None
            stores = [self._store(o, scope) for o in self.k.outputs]
            return lines + scope.lines + stores
        return lines + self._looped()

    def _levels(self) -> dict[int, int]:
        levels: dict[int, int] = {}

        def level(node_id: int) -> int:
            if node_id in levels:
                return levels[node_id]
            node = self.graph.node(node_id)
            inner = max((level(i) for i in node.inputs if i in self.members), default=0)
            levels[node_id] = inner + (1 if node.op == "reduce" else 0)
            return levels[node_id]

        for n in self.k.nodes:
            level(n)
        return levels

    def _online_sums(self) -> dict[int, int]:
        """{max reduction: the sum of exp(x - that max) over the same row}: the pairs a softmax or logsumexp makes.
        Each pair is taken in one pass (the sum rescaled as the running max grows), not two: a streamed row is
        read once fewer (on the H200, KernelBench's 4096 x 393216 softmax read its rows three times: 0.77x of
        torch.compile, which reads them twice)."""
        pairs: dict[int, int] = {}
        for s in self.k.nodes:
            total = self.graph.node(s)
            if total.op != "reduce" or total.fn != "sum" or not isinstance(total.args[0], V) or total.args[0].id not in self.members:
                continue
            exps = self.graph.node(total.args[0].id)
            if exps.op != "pointwise" or exps.fn != "exp" or len(exps.args) != 1 or not isinstance(exps.args[0], V) or exps.args[0].id not in self.members:
                continue
            shifted = self.graph.node(exps.args[0].id)
            if shifted.op != "pointwise" or shifted.fn != "sub" or len(shifted.args) != 2 or not all(isinstance(a, V) for a in shifted.args):
                continue
            x, peak = (a.id for a in shifted.args)
            top = self.graph.node(peak)
            if (peak in self.members and top.op == "reduce" and top.fn == "max" and isinstance(top.args[0], V) and top.args[0].id == x
                    and top.attr("axes") == total.attr("axes") and peak not in pairs):
                pairs[peak] = s
        return pairs

    def _online(self, peak: Node, total: Node, scope: Scope, after: list[str]) -> tuple[str, str]:
        """(initialisation, update) of a max and the sum of exp(x - max) in one walk: each lane keeps its running
        max and its sum scaled to it; after the walk, the lanes' sums are scaled to the row's max."""
        x = self.value(peak.args[0].id, scope)
        m, s = f"acc{peak.id}", f"acc{total.id}"
        inf = IDENTITY["max"]
        init = f"{m} = tl.full([XBLOCK, RBLOCK], {inf}, tl.float32)\n{s} = tl.zeros([XBLOCK, RBLOCK], tl.float32)"
        update = "\n".join((
            f"chunk{peak.id} = tl.where(xmask & rmask, {x}, {inf})",
            f"grown{peak.id} = tl.maximum({m}, chunk{peak.id})",
            f"{s} = tl.where(grown{peak.id} == {inf}, 0.0, {s} * tl.exp({m} - grown{peak.id}) + tl.exp(chunk{peak.id} - grown{peak.id}))",
            f"{m} = grown{peak.id}",
        ))
        after.append(f"t{peak.id} = tl.max({m}, axis=1, keep_dims=True)")
        after.append(f"t{total.id} = tl.sum(tl.where({m} == {inf}, 0.0, {s} * tl.exp({m} - t{peak.id})), axis=1, keep_dims=True)")
        return init, update

    def _looped(self) -> list[str]:
        levels = self._levels()
        reduces = [n for n in self.k.nodes if self.graph.node(n).op == "reduce"]
        online = self._online_sums()
        outer = Scope()  # values constant along the row: computed once, outside the loops
        lines: list[str] = []
        walked = 0
        for lvl in range(1, max((levels[r] for r in reduces), default=0) + 1):
            wave = [self.graph.node(r) for r in reduces if levels[r] == lvl and r not in online.values()]
            if not wave:
                continue
            lines += self._outer_values(outer, [r.args[0].id for r in wave])
            inner = Scope(defined=set(outer.defined))
            inits, updates, after = [], [], []
            for node in wave:
                if node.id in online:
                    init, update = self._online(node, self.graph.node(online[node.id]), inner, after)
                else:
                    init, update = self._accumulate(node, inner, after)
                inits.append(init)
                updates.append(update)
            kinds = ", ".join(sorted({"max and sum of exp(x - max)" if n.id in online else n.fn for n in wave}))
            walked += 1
            lines += [f"# pass {walked}: {kinds} over the row"] + "\n".join(inits).splitlines()
            lines += self._loop(inner.lines + "\n".join(updates).splitlines())
            lines += after
            outer.defined.update(n.id for n in wave)
            outer.defined.update(online[n.id] for n in wave if n.id in online)
        full_outputs = [o for o in self.k.outputs if self.varies(o)]
        lines += self._outer_values(outer, [o for o in self.k.outputs if not self.varies(o)])
        lines += [self._store(o, outer) for o in self.k.outputs if not self.varies(o)]
        if full_outputs:
            lines += self._outer_values(outer, full_outputs)
            inner = Scope(defined=set(outer.defined))
            for o in full_outputs:
                self.value(o, inner)
            lines += ["# last pass: the full-size outputs"] + self._loop(inner.lines + [self._store(o, inner) for o in full_outputs])
        return lines

    def _outer_values(self, outer: Scope, targets: list[int]) -> list[str]:
        """Emit, outside the loops, every value constant along the row that `targets` need and is not there yet."""
        before = len(outer.lines)

        def visit(node_id: int) -> None:
            if node_id in outer.defined:
                return
            node = self.graph.node(node_id)
            member = node_id in self.members
            if self.varies(node_id):
                for i in node.inputs if member else ():
                    visit(i)  # a value along the row is computed in the loop; what it reads off the row is hoisted
                return
            if node.op == "reduce" and member:
                return  # finished by its own pass
            for i in node.inputs if member else ():
                visit(i)
            self.value(node_id, outer)

        for t in targets:
            visit(t)
        return outer.lines[before:]

    def _loop(self, body: list[str]) -> list[str]:
        head = ["for r0 in range(0, RNUMEL, RBLOCK):", "    rindex = r0 + rbase", "    rmask = rindex < RNUMEL"]
        return head + [f"    {line}" for line in body]

    # host side ----------------------------------------------------------------------------------------------------

    def _launcher(self) -> str:
        c = self.config
        loads = [self.names[i] for i in self.k.loads]
        dests = [self.effects[o] for o in self.k.outputs if o in self.effects]
        args = loads + dests
        device = loads[0] if loads else (dests[0] if dests else "torch")
        lines = [f"def {self.name}({', '.join(args)}):", f'    """{self.summary()}"""']
        for o in self.k.outputs:
            if o in self.effects:
                continue
            node = self.graph.node(o)
            lines.append(f"    {self.names[o]} = torch.empty({tuple(node.shape)}, device={device}.device, dtype=torch.{node.dtype})")
        pointers = ", ".join([*loads, *(self.effects.get(o, self.names[o]) for o in self.k.outputs)])
        sizes = f"XNUMEL={self.xnumel}" + (f", RNUMEL={self.rnumel}" if self.reducing else "")
        blocks = f"XBLOCK={c.xblock}" + (f", RBLOCK={c.rblock}" if self.reducing else "")
        lines.append(f'    {self.name}_kernel[lambda meta: (triton.cdiv({self.xnumel}, meta["XBLOCK"]),)](')
        lines.append(f"        {pointers}, {sizes}, {blocks}, num_warps={c.num_warps})")
        returned = [self.names[o] for o in self.k.outputs if o not in self.effects]
        lines.append(f"    return {', '.join(returned)}" if returned else "    return None")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        c = self.config
        if c.mode == "pointwise":
            return f"{len(self.k.nodes)} elementwise ops over {list(self.domain)} in one pass (row kernel, pointwise)."
        axes = list(self.k.raxes)
        if c.mode == "persistent":
            return f"Reduction over axes {axes} of {list(self.domain)} with its pointwise work fused; rows held in registers."
        return f"Reduction over axes {axes} of {list(self.domain)} with its pointwise work fused; long rows walked in chunks."

    def _bytes(self) -> int:
        return sum(self.graph.node(i).numel * dtype_size(self.graph.node(i).dtype) for i in (*self.k.loads, *self.k.outputs))
