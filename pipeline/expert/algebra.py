"""Exact rewrites of the IR: each one names the identity it uses and checks its precondition on the graph.

Lowering:
- `matvec_as_reduction` (when GEMMs are Triton's): A @ x with x a single column (or a single row on the left) is a
  row reduction of A * x, memory-bound, not a GEMM tile with 15 of its 16 columns wasted;
- `split_reduction` (`Options.split`): a long reduction over too few rows to fill the GPU becomes partial results
  by many programs and a small combine (batch norm's statistics over N, H, W per channel);
- `split_k` (`Options.split_k`): see SplitK.
Expert transformations (stage 1's "transform" step, `Options.algebra`):
- `identity_removal`: x * 1, x / 1, x + 0, x ** 1, casts to the same dtype, relu(relu(x)), -(-x);
- `log_of_softmax`: log(softmax(x)) is log_softmax(x) = (x - max) - log(sum(exp(x - max))): one division and one
  logarithm of a quotient fewer, and exact where softmax underflows to 0;
- `bias_before_batch_norm`: in training mode batch norm subtracts the batch mean, so a bias constant over the
  reduced axes cancels exactly: BN(y + c) = BN(y); the bias survives only in the running mean;
- `sum_of_linear`: sum_n (A @ B)[m, n] = sum_k A[m, k] * (sum_n B[k, n]): a sum (or mean) over a GEMM's output
  columns is a matrix-vector product with the pre-reduced weight (M*K reads instead of an M*N*K GEMM);
- `reshape_sinking`: pointwise work after a reshape of a computed value is done before it, on the same elements in
  the same order, so it joins the kernel that computed the value (group norm's affine and activation fuse);
- `one_pass_moments` (a dataflow reorganization, exact in real arithmetic): sum((x - mean)^2) = sum(x^2) -
  sum(x)^2 / n, so a norm over rows too long for registers reads x once for both statistics, not twice.
Every rule is checked numerically against the module by tests (tests/expert/test_algebra.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pipeline.expert.ir import Builder, Graph, Node, V
from pipeline.expert.options import Options

RESHAPES = {"Tensor.view", "Tensor.reshape", "torch.reshape", "Tensor.flatten", "torch.flatten", "Tensor.unflatten",
            "Tensor.unsqueeze", "torch.unsqueeze", "Tensor.squeeze", "torch.squeeze", "Tensor.view_as", "Tensor.reshape_as"}


class Rewriter:
    """Copies a graph node by node into a new builder; a rule may build something else in a node's place."""

    def __init__(self, graph: Graph) -> None:
        self.old, self.b = graph, Builder()
        self.map: dict[int, V] = {}
        self.users = graph.users()
        self.views: dict[tuple, V] = {}  # (old node, outer shape, inner shape) -> its view built by a rule

    def arg(self, value: Any) -> Any:
        if isinstance(value, V):
            return self.map[value.id]
        if isinstance(value, tuple):
            return tuple(self.arg(v) for v in value)
        return value

    def copy(self, node: Node) -> V:
        self.b.origin = node.origin
        return self.b.add(node.op, node.fn, self.arg(node.args), node.shape, node.dtype, node.stride, **dict(node.attrs))

    def node(self, value: V) -> Node:
        """The new graph's node behind a mapped value."""
        return self.b.node(value)

    def run(self, rule: Callable[[Node, Rewriter], V | None]) -> tuple[Graph, bool]:
        changed = False
        for node in self.old.nodes:
            replaced = rule(node, self)
            changed |= replaced is not None
            self.map[node.id] = replaced if replaced is not None else self.copy(node)
        outputs = _map_outputs(self.old.outputs, self.map)
        from pipeline.expert.ir import Effect

        self.b.effects = [Effect(e.param, self.map[e.value].id) for e in self.old.effects]
        return Graph(tuple(self.b.nodes), outputs, tuple(self.b.effects)), changed


def _map_outputs(outputs: Any, mapping: dict[int, V]) -> Any:
    if isinstance(outputs, int):
        return mapping[outputs].id
    return tuple(_map_outputs(o, mapping) for o in outputs)


def _scalar_arg(node: Node, value: float) -> V | None:
    """The tensor argument of a binary pointwise node whose other argument is the scalar `value`."""
    tensors = [a for a in node.args if isinstance(a, V)]
    scalars = [a for a in node.args if not isinstance(a, V)]
    if len(tensors) == 1 and len(scalars) == 1 and isinstance(scalars[0], (int, float)) and float(scalars[0]) == value:
        return tensors[0]
    return None


# lowering -----------------------------------------------------------------------------------------------------------


def matvec_as_reduction(node: Node, rw: Rewriter) -> V | None:
    if node.op != "matmul":
        return None
    a, b = (rw.map[v.id] for v in node.args)
    m, n = node.shape[-2], node.shape[-1]
    rw.b.origin = node.origin or "matmul"
    if n == 1:  # A[.., M, K] * x^T[.., 1, K], summed over K
        return rw.b.reduce("sum", rw.b.pw("mul", a, rw.b.view(b, "transpose", -1, -2)), (len(node.shape) - 1,))
    if m == 1:  # x^T[.., K, 1] * B[.., K, N], summed over K
        return rw.b.reduce("sum", rw.b.pw("mul", rw.b.view(a, "transpose", -1, -2), b), (len(node.shape) - 2,))
    return None


class SplitK:
    """A @ B = sum_s A[:, s-th K slice] @ B[s-th K slice, :]: a batched GEMM over S slices of K, then a sum over
    S that also runs the epilogue (after `reshape_sinking`). For GEMMs whose output tiles cannot fill the GPU."""

    def __init__(self, slices: int, exact: bool = False) -> None:
        self.slices, self.exact = slices, exact  # exact: cut only fp32 GEMMs too long to sum in one pass at 1e-4
        self.used: list[int] = []  # slices of each GEMM it split

    def __call__(self, node: Node, rw: Rewriter) -> V | None:
        if node.op != "matmul" or len(node.shape) != 2 or len(rw.old.node(node.args[0].id).shape) != 2:
            return None
        a, b = (rw.map[v.id] for v in node.args)
        m, n = node.shape
        k = rw.node(a).shape[1]
        if self.exact:
            from pipeline.expert.precision import exact_slices

            s = exact_slices(k) if node.dtype == "float32" else 1
        else:
            s = min(self.slices, split_k_slices(m, n, k))  # only GEMMs whose tiles leave SMs idle are split
        if s < 2 or k % s:
            return None
        self.used.append(s)
        rw.b.origin = node.origin or "matmul"
        a_slices = rw.b.view(rw.b.view(a, "reshape", (m, s, k // s)), "permute", 1, 0, 2)  # [S, M, K/S], no copy
        b_slices = rw.b.view(b, "reshape", (s, k // s, n))  # [S, K/S, N]
        partial = rw.b.add("matmul", "matmul", (a_slices, b_slices), (s, m, n), node.dtype)
        return rw.b.reshaped(rw.b.reduce("sum", partial, (0,)), (m, n))


def split_k_slices(m: int, n: int, k: int, block_m: int = 128, block_n: int = 128, sms: int = 132) -> int:
    """How many K slices to add when a GEMM's output tiles leave SMs idle: the most (up to 16) that keep at least
    256 of K per slice and no more than two programs per SM; 1 when the tiles already fill the GPU."""
    tiles = -(-m // block_m) * -(-n // block_n)
    if tiles >= sms:
        return 1
    for slices in (16, 8, 4, 2):
        if tiles * slices <= 2 * sms and k % slices == 0 and k // slices >= 256:
            return slices
    return 1


class SplitReduction:
    """A long reduction over few rows leaves most SMs idle: partial results by many programs, then a combine.
    With several reduced axes the partials reduce the inner ones (batch norm: per image and channel, then over the
    batch); with one, the axis is split into S slices viewed as an extra axis (sum, max and min combine exactly)."""

    MIN_LENGTH = 8192  # shorter rows are cheap enough whole
    SMS = 132

    def __call__(self, node: Node, rw: Rewriter) -> V | None:
        if node.op != "reduce" or node.fn not in ("sum", "max", "min"):
            return None
        x = rw.old.node(node.args[0].id)
        axes = tuple(node.attr("axes"))
        length = math.prod(x.shape[a] for a in axes)
        programs = (x.numel // max(length, 1)) // self._rows_per_program(x, axes)
        if length < self.MIN_LENGTH or programs >= 2 * self.SMS:
            return None
        rw.b.origin = node.origin
        source = rw.map[x.id]
        inner = tuple(a for a in axes[1:] if x.shape[a] > 1)
        if inner and x.shape[axes[0]] > 1:  # the outer reduced axis becomes rows of the partials: as many times more programs
            partial = rw.b.reduce(node.fn, source, inner)
            return rw.b.reduce(node.fn, partial, axes[:1])
        return self._sliced(node, x, axes[0], programs, rw) if len(axes) == 1 else None

    def _rows_per_program(self, x: Node, axes: tuple[int, ...]) -> int:
        """1 when the rows are contiguous in memory (one program per row), else a tile of 64 kept elements."""
        from pipeline.expert.rowkernel import reduces_contiguous_axis

        return 1 if reduces_contiguous_axis(x.shape, x.stride, axes) else 64

    def _sliced(self, node: Node, x: Node, axis: int, programs: int, rw: Rewriter) -> V | None:
        n = x.shape[axis]
        sizes = [s for s in (2, 4, 8, 16, 32, 64) if n % s == 0 and n // s >= 512]
        if not sizes:
            return None
        slices = next((s for s in sizes if programs * s >= 4 * self.SMS), sizes[-1])
        shape = (*x.shape[:axis], slices, n // slices, *x.shape[axis + 1:])
        sliced = _rebuilt(rw, x.id, x.shape, shape, {})
        if sliced is None:
            return None
        partial = rw.b.reduce(node.fn, sliced, (axis + 1,))
        return rw.b.reshaped(rw.b.reduce(node.fn, partial, (axis,)), node.shape)


def _rebuilt(rw: Rewriter, old_id: int, outer: tuple[int, ...], inner: tuple[int, ...], memo: dict[int, V]) -> V | None:
    """The pointwise work computing `old_id` (of shape `outer`) redone in the `inner` view of the same elements;
    what it reads is viewed so (None where that view would need a copy)."""
    if old_id in memo:
        return memo[old_id]
    node = rw.old.node(old_id)
    if node.op == "pointwise" and node.shape == tuple(outer):
        args = []
        for a in node.args:
            value = _rebuilt(rw, a.id, outer, inner, memo) if isinstance(a, V) else a
            if value is None:
                return None
            args.append(value)
        rw.b.origin = node.origin
        out = rw.b.pw(node.fn, *args, dtype=node.dtype, **dict(node.attrs))
    elif node.op == "iota":
        return None  # an index along an axis that the view splits: not worth it
    else:
        key = (old_id, tuple(outer), tuple(inner))
        if key not in rw.views:  # one view per value and shape, so kernels reading it are seen to share the read
            value = rw.map[old_id]
            if node.shape != tuple(outer):
                value = rw.b.view(value, "expand", tuple(outer))
            rw.views[key] = rw.b.view(value, "reshape", tuple(inner))
        out = rw.views[key]
        if rw.node(out).meta.contiguous and node.numel < math.prod(inner):
            return None  # torch would copy the broadcast: no
    memo[old_id] = out
    return out


# expert transformations ---------------------------------------------------------------------------------------------


def identity_removal(node: Node, rw: Rewriter) -> V | None:
    if node.op != "pointwise":
        return None
    keep = None
    if node.fn in ("mul", "div") and (node.fn == "mul" or isinstance(node.args[1], (int, float))):
        keep = _scalar_arg(node, 1.0)
    elif node.fn in ("add", "sub") and node.attr("alpha", 1) == 1 and (node.fn == "add" or isinstance(node.args[1], (int, float))):
        keep = _scalar_arg(node, 0.0)
    elif node.fn == "pow" and node.attr("exponent") == 1.0:
        keep = node.args[0]
    elif node.fn == "identity":
        keep = node.args[0]
    elif node.fn == "cast" and rw.old.node(node.args[0].id).dtype == node.dtype:
        keep = node.args[0]
    elif node.fn in ("relu", "neg") and isinstance(node.args[0], V):
        inner = rw.old.node(node.args[0].id)
        if inner.op == "pointwise" and inner.fn == node.fn:
            keep = node.args[0] if node.fn == "relu" else inner.args[0]
    if keep is None or rw.old.node(keep.id).shape != node.shape or rw.old.node(keep.id).dtype != node.dtype:
        return None
    return rw.map[keep.id]


def log_of_softmax(node: Node, rw: Rewriter) -> V | None:
    if not (node.op == "pointwise" and node.fn == "log"):
        return None
    quotient = rw.old.node(node.args[0].id)
    if not (quotient.op == "pointwise" and quotient.fn == "div" and all(isinstance(a, V) for a in quotient.args)):
        return None
    exps, total = (rw.old.node(a.id) for a in quotient.args)
    if not (exps.op == "pointwise" and exps.fn == "exp" and total.op == "reduce" and total.fn == "sum" and total.args[0].id == exps.id):
        return None
    rw.b.origin = "log_softmax"
    return rw.b.pw("sub", rw.map[exps.args[0].id], rw.b.pw("log", rw.map[total.id]))


def _constant_over(shape: tuple[int, ...], rank: int, axes: tuple[int, ...]) -> bool:
    padded = (1,) * (rank - len(shape)) + tuple(shape)
    return all(padded[a] == 1 for a in axes)


class BiasBeforeBatchNorm:
    """mean(y + c) = mean(y) + c and (y + c) - mean(y + c) = y - mean(y), for c constant over the mean's axes."""

    def __init__(self) -> None:
        self.centred: dict[int, tuple[int, V]] = {}  # old mean node -> (old x node, new mean of y)

    def __call__(self, node: Node, rw: Rewriter) -> V | None:
        if node.op != "pointwise":
            return None
        if node.fn == "div":
            return self._mean(node, rw)
        if node.fn == "sub" and isinstance(node.args[1], V) and node.args[1].id in self.centred:
            x_id, mean_y = self.centred[node.args[1].id]
            if isinstance(node.args[0], V) and node.args[0].id == x_id:
                y = self._parts(rw.old.node(x_id), rw)[0]
                rw.b.origin = node.origin
                return rw.b.pw("sub", rw.map[y.id], mean_y)
        return None

    def _parts(self, x: Node, rw: Rewriter) -> tuple[V, V] | tuple[None, None]:
        if not (x.op == "pointwise" and x.fn == "add" and x.attr("alpha", 1) == 1 and all(isinstance(a, V) for a in x.args)):
            return None, None
        first, second = x.args
        return (first, second) if rw.old.node(first.id).shape == x.shape else (second, first)

    def _mean(self, node: Node, rw: Rewriter) -> V | None:
        total = rw.old.node(node.args[0].id) if isinstance(node.args[0], V) else None
        if total is None or total.op != "reduce" or total.fn != "sum" or not isinstance(node.args[1], float):
            return None
        x = rw.old.node(total.args[0].id)
        y, c = self._parts(x, rw)
        axes = total.attr("axes")
        if y is None or rw.old.node(y.id).shape != x.shape or not _constant_over(rw.old.node(c.id).shape, len(x.shape), axes):
            return None
        if float(node.args[1]) != float(math.prod(x.shape[a] for a in axes)):
            return None
        if not any(rw.old.node(u).fn == "sub" for u in rw.users[node.id]):
            return None  # not a centring mean: nothing to gain
        rw.b.origin = node.origin
        mean_y = rw.b.pw("div", rw.b.reduce("sum", rw.map[y.id], axes), node.args[1])
        self.centred[node.id] = (x.id, mean_y)
        return rw.b.pw("add", mean_y, rw.map[c.id])  # what the running mean still needs


def one_pass_moments(node: Node, rw: Rewriter) -> V | None:
    """sum((x - sum(x)/n)^2) = sum(x^2) - sum(x)^2/n: both sums in one pass over x instead of two (clamped at 0
    against rounding). Only for reductions too long for registers, where the second pass is a second read of x."""
    if not (node.op == "reduce" and node.fn == "sum"):
        return None
    square = rw.old.node(node.args[0].id)
    if not (square.op == "pointwise" and square.fn == "mul" and len({a.id for a in square.args if isinstance(a, V)}) == 1
            and all(isinstance(a, V) for a in square.args)):
        return None
    centred = rw.old.node(square.args[0].id)
    if not (centred.op == "pointwise" and centred.fn == "sub" and all(isinstance(a, V) for a in centred.args)):
        return None
    x, mean = (rw.old.node(a.id) for a in centred.args)
    if not (mean.op == "pointwise" and mean.fn == "div" and isinstance(mean.args[0], V) and isinstance(mean.args[1], float)):
        return None
    total = rw.old.node(mean.args[0].id)
    axes = node.attr("axes")
    count = float(math.prod(x.shape[a] for a in axes))
    if not (total.op == "reduce" and total.fn == "sum" and total.args[0].id == x.id and total.attr("axes") == axes
            and mean.args[1] == count and x.shape == square.shape):
        return None
    from pipeline.expert.rowkernel import held_in_registers, reduces_contiguous_axis

    if held_in_registers(int(count), reduces_contiguous_axis(x.shape, x.stride, axes)):
        return None  # a row held in registers is read once either way; the two-pass form is the more exact
    rw.b.origin = node.origin
    squares = rw.b.reduce("sum", rw.b.pw("mul", rw.map[x.id], rw.map[x.id]), axes)
    sums = rw.map[total.id]
    return rw.b.pw("clamp", rw.b.pw("sub", squares, rw.b.pw("div", rw.b.pw("mul", sums, sums), count)), lo=0.0, hi=None)


def sum_of_linear(node: Node, rw: Rewriter) -> V | None:
    if not (node.op == "reduce" and node.fn == "sum"):
        return None
    x = rw.old.node(node.args[0].id)
    rank = len(x.shape)
    if node.attr("axes") != (rank - 1,) or len(rw.users[x.id]) != 1:
        return None
    product, bias = x, None
    if x.op == "pointwise" and x.fn == "add" and x.attr("alpha", 1) == 1 and all(isinstance(a, V) for a in x.args):
        parts = [rw.old.node(a.id) for a in x.args]
        product = next((p for p in parts if p.op == "matmul"), None)
        bias = next((p for p in parts if p is not product), None)
        if product is None or len(rw.users[product.id]) != 1 or not _constant_over(bias.shape, rank, tuple(range(rank - 1))):
            return None
    if product.op != "matmul" or (product is x and len(rw.users[x.id]) != 1):
        return None
    a, b = (rw.map[v.id] for v in product.args)
    rw.b.origin = "sum_of_linear"
    weight_sums = rw.b.reduce("sum", b, (len(rw.node(b).shape) - 1,))  # [.., K, 1]: each row of B summed once
    rows = rw.b.reduce("sum", rw.b.pw("mul", a, rw.b.view(weight_sums, "transpose", -1, -2)), (rank - 1,))
    if bias is not None:
        bias_total = rw.b.reduce("sum", rw.map[bias.id], tuple(range(len(bias.shape))))
        rows = rw.b.pw("add", rows, bias_total)
    return rows


def reshape_sinking(node: Node, rw: Rewriter) -> V | None:
    """p(reshape(u), e...) -> reshape(p(u, e viewed as u's shape)) for pointwise p over a computed u."""
    if node.op != "pointwise":
        return None
    views = [a for a in node.args if isinstance(a, V) and _sinkable(rw.old.node(a.id), rw)]
    if len(views) != 1:
        return None
    view = rw.old.node(views[0].id)
    if node.shape != view.shape:
        return None  # the reshaped value is broadcast by the op: its elements are not the op's
    source = rw.map[view.args[0][0].id]
    inner_shape = rw.node(source).shape
    args = []
    for a in node.args:
        if isinstance(a, V) and a.id == view.id:
            args.append(source)
        elif isinstance(a, V):
            moved = _reshaped_external(rw, rw.old.node(a.id), node.shape, inner_shape)
            if moved is None:
                return None
            args.append(moved)
        else:
            args.append(a)
    rw.b.origin = node.origin
    inner = rw.b.pw(node.fn, *args, dtype=node.dtype, **dict(node.attrs))
    if rw.node(inner).shape != inner_shape:
        return None
    return rw.b.reshaped(inner, node.shape)


def _sinkable(view: Node, rw: Rewriter) -> bool:
    if view.op != "view" or view.fn not in RESHAPES or not view.inputs:
        return False
    source = rw.old.node(view.inputs[0])
    return source.op in ("pointwise", "reduce") and view.numel == source.numel and view.meta.contiguous


def _reshaped_external(rw: Rewriter, external: Node, outer_shape: tuple[int, ...], inner_shape: tuple[int, ...]) -> V | None:
    """An operand of the outer (viewed) shape, broadcast, as a view of the inner shape; None if that needs a copy."""
    if external.op in ("pointwise", "reduce"):
        return None  # a computed operand would have to be reshaped too: leave it
    value = rw.map[external.id]
    if external.shape != tuple(outer_shape):
        value = rw.b.view(value, "expand", tuple(outer_shape))
    moved = rw.b.view(value, "reshape", tuple(inner_shape))
    if rw.node(moved).meta.contiguous and external.numel < math.prod(inner_shape):
        return None  # torch would materialize the broadcast: not worth it
    return moved


LOWERING_RULES = (("matvec_as_reduction", lambda: matvec_as_reduction),)
TRANSFORMS: tuple[tuple[str, Callable[[], Callable[[Node, Rewriter], V | None]]], ...] = (
    ("identity_removal", lambda: identity_removal),
    ("log_of_softmax", lambda: log_of_softmax),
    ("bias_before_batch_norm", BiasBeforeBatchNorm),
    ("sum_of_linear", lambda: sum_of_linear),
    ("reshape_sinking", lambda: reshape_sinking),
    ("one_pass_moments", lambda: one_pass_moments),
)
MAX_PASSES = 4  # sinking a reshape below one op exposes the next: a few passes reach the fixed point


def apply(graph: Graph, rules) -> tuple[Graph, list[str]]:
    applied: list[str] = []
    for _ in range(MAX_PASSES):
        changed_any = False
        for name, make in rules:
            graph, changed = Rewriter(graph).run(make())
            if changed:
                changed_any = True
                if name not in applied:
                    applied.append(name)
        if not changed_any:
            break
    return graph, applied


def lower_rules(graph: Graph, options: Options) -> tuple[Graph, list[str]]:
    """The lowering rewrites: split reductions when the options allow it, matvec as a reduction when GEMMs are
    Triton's, and split-K when the options ask for it (its sum then takes the epilogue, by sinking the reshape)."""
    applied: list[str] = []
    if options.split:
        graph, changed = Rewriter(graph).run(SplitReduction())
        if changed:
            graph, _ = apply(graph, (("reshape_sinking", lambda: reshape_sinking),))  # the combine takes what follows
            applied.append("split_reduction")
    if options.gemm != "triton":
        return graph, applied
    graph, lowered = apply(graph, LOWERING_RULES)
    applied += lowered
    if options.precision in ("planned", "ieee"):  # exact fp32 sums past one pass's reach: K cut into slices
        exact = SplitK(0, exact=True)
        graph, changed = Rewriter(graph).run(exact)
        if changed:
            graph, _ = apply(graph, (("reshape_sinking", lambda: reshape_sinking),))
            applied.append(f"exact_split_k_{max(exact.used)}")
    if options.split_k > 1:
        split = SplitK(options.split_k)
        graph, changed = Rewriter(graph).run(split)
        if changed:
            graph, _ = apply(graph, (("reshape_sinking", lambda: reshape_sinking),))
            applied.append(f"split_k_{max(split.used)}")
    return graph, applied


def simplify(graph: Graph, options: Options) -> tuple[Graph, list[str]]:
    """The expert transformations; returns the graph and the names of the rules that changed it."""
    return apply(graph, TRANSFORMS)
