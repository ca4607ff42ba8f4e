"""The expert backend's intermediate form: the problem as a graph of a few kinds of node, every shape known.

Kinds (`Node.op`):
- `input`, `param`: a forward argument, a parameter or buffer (by dotted name);
- `pointwise`: one elementwise function of tensors (broadcast) and scalars, `fn` from pipeline.expert.pointwise;
- `iota`: the index along one axis of a shape (for gathers written as masked reductions);
- `reduce`: sum / max / min / argmax / argmin over some axes (always keeping them, as size 1);
- `matmul`: a[..., M, K] @ b[..., K, N] with broadcast batch dimensions;
- `conv`: a 2-D convolution without bias (the bias is a pointwise add after it, so it can be fused);
- `scan`: a cumulative sum or product along one axis (`axis`), from the end backwards where `reverse`;
- `view`: a torch call that only re-describes memory (view, permute, select, expand ...), run by the host;
- `library`: any other torch call, run by the host as the reference runs it.
Values computed by kernels are laid out contiguously; views and library results keep the layout the recording saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.expert.graph import TensorMeta, contiguous_strides

FLOATS = ("float64", "float32", "bfloat16", "float16")
COMPUTE_OPS = ("pointwise", "reduce", "matmul", "conv", "iota", "window", "scan")
PURE = frozenset({"pointwise", "reduce", "matmul", "conv", "iota", "window", "scan", "view", "input", "param"})  # library calls may not be


@dataclass(frozen=True)
class V:
    """A reference to a node's value inside another node's arguments."""

    id: int


@dataclass(frozen=True)
class Node:
    id: int
    op: str
    fn: str
    args: tuple
    attrs: tuple[tuple[str, Any], ...]
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...]
    origin: str = ""  # the recorded call this node came from (names kernels after what they compute)

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    @property
    def inputs(self) -> tuple[int, ...]:
        """Ids of the nodes this one reads, in argument order (nested arguments too)."""
        return tuple(_refs(self.args))

    @property
    def numel(self) -> int:
        total = 1
        for size in self.shape:
            total *= size
        return total

    @property
    def meta(self) -> TensorMeta:
        return TensorMeta(self.shape, self.dtype, self.stride)


@dataclass(frozen=True)
class Effect:
    """A write the reference makes besides its outputs: a buffer updated in place (batch norm's running stats)."""

    param: str
    value: int  # the node holding the new value (its shape is the buffer's, up to size-1 axes)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    outputs: Any  # a node id, or a tuple of them (the forward's return structure)
    effects: tuple[Effect, ...] = ()

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def users(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                if n.id not in found[i]:
                    found[i].append(n.id)
        return found

    def output_ids(self) -> list[int]:
        return list(_refs_plain(self.outputs))

    def live(self) -> set[int]:
        """Nodes the outputs and effects depend on (and library calls kept for their side effects)."""
        wanted = [*self.output_ids(), *(e.value for e in self.effects),
                  *(n.id for n in self.nodes if n.op == "library" and n.attr("side_effect"))]
        seen: set[int] = set()
        while wanted:
            node_id = wanted.pop()
            if node_id not in seen:
                seen.add(node_id)
                wanted.extend(self.nodes[node_id].inputs)
        return seen


def _refs(value: Any):
    if isinstance(value, V):
        yield value.id
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _refs(item)


def _refs_plain(value: Any):
    if isinstance(value, int):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _refs_plain(item)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def promote(dtypes: list[str], scalars: list[Any]) -> str:
    """torch's result dtype for an elementwise op, for the dtypes this backend meets."""
    floats = [d for d in dtypes if d in FLOATS]
    if floats:
        if len(set(floats)) == 1:
            return floats[0]
        return "float32" if "float64" not in floats else "float64"
    if any(isinstance(s, float) for s in scalars):
        return "float32"
    ints = [d for d in dtypes if d not in ("bool",)]
    return ints[0] if ints else "bool"


@dataclass
class Builder:
    """Appends nodes; shapes and dtypes are computed here (views take theirs from torch on meta tensors)."""

    nodes: list[Node] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    origin: str = ""  # set by the decomposer while it lowers one recorded call
    seen: dict = field(default_factory=dict)  # pure nodes by what they compute (common subexpressions)

    def add(self, op: str, fn: str, args: tuple, shape: tuple[int, ...], dtype: str, layout: tuple[int, ...] | None = None,
            **attrs: Any) -> V:
        """A new node; `layout` is its strides (contiguous unless given). A pure node that repeats an earlier one
        (same op, arguments and attributes) is that node: the decompositions may ask for x - mean twice."""
        stride = tuple(layout) if layout is not None else contiguous_strides(tuple(shape))
        key = (op, fn, tuple(args), tuple(sorted(attrs.items())), tuple(shape), dtype, stride)
        if op in PURE and key in self.seen:
            return self.seen[key]
        node = Node(len(self.nodes), op, fn, tuple(args), key[3], tuple(shape), dtype, stride, self.origin)
        self.nodes.append(node)
        if op in PURE:
            self.seen[key] = V(node.id)
        return V(node.id)

    def node(self, value: V) -> Node:
        return self.nodes[value.id]

    # leaves -------------------------------------------------------------------------------------------------------

    def input(self, index: int, meta: TensorMeta) -> V:
        return self.add("input", "input", (), meta.shape, meta.dtype, meta.stride, index=index)

    def param(self, name: str, meta: TensorMeta) -> V:
        return self.add("param", "param", (), meta.shape, meta.dtype, meta.stride, name=name)

    def iota(self, shape: tuple[int, ...], axis: int) -> V:
        return self.add("iota", "iota", (), shape, "int32", axis=axis % len(shape))

    # computation --------------------------------------------------------------------------------------------------

    def pw(self, fn: str, *args: Any, dtype: str | None = None, **attrs: Any) -> V:
        """An elementwise node of tensors (V) and scalars."""
        from pipeline.expert.pointwise import result_dtype

        refs = tuple(a if isinstance(a, V) else _scalar(a) for a in args)
        tensors = [self.nodes[r.id] for r in refs if isinstance(r, V)]
        if not tensors:
            raise ValueError(f"{fn}: no tensor argument")
        shape = broadcast_shape(*(t.shape for t in tensors))
        scalars = [r for r in refs if not isinstance(r, V)]
        out_dtype = dtype or result_dtype(fn, [t.dtype for t in tensors], scalars, attrs)
        return self.add("pointwise", fn, refs, shape, out_dtype, **attrs)

    def reduce(self, kind: str, x: V, axes: tuple[int, ...]) -> V:
        """Reduce over `axes` keeping them as size 1 (a non-keepdim result is a view after it)."""
        node = self.nodes[x.id]
        rank = len(node.shape)
        axes = tuple(sorted({a % rank for a in axes} if rank else ()))
        shape = tuple(1 if i in axes else s for i, s in enumerate(node.shape))
        dtype = "int64" if kind in ("argmax", "argmin") else (node.dtype if node.dtype in FLOATS else "int64" if kind == "sum" else node.dtype)
        return self.add("reduce", kind, (x,), shape, dtype, axes=axes)

    def scan(self, kind: str, x: V, axis: int, reverse: bool = False) -> V:
        """A cumulative `kind` (sum or prod) of `x` along `axis`, from the last element back where `reverse`."""
        node = self.nodes[x.id]
        return self.add("scan", kind, (x,), node.shape, node.dtype, axis=axis % len(node.shape), reverse=reverse)

    def view(self, x: V, method: str, *args: Any) -> V:
        """A host-side view (or reshape) of `x`, written as the tensor method `method(*args)`; layout from torch."""
        import torch

        node = self.nodes[x.id]
        probe = torch.empty_strided(node.shape, node.stride, dtype=getattr(torch, node.dtype), device="meta")
        out = getattr(probe, method)(*args)
        return self.add("view", f"Tensor.{method}", ((x, *args), ()), tuple(out.shape), node.dtype, tuple(out.stride()),
                        index=0, tuple_output=False)

    def reshaped(self, x: V, shape: tuple[int, ...]) -> V:
        """`x` viewed as `shape` (same elements in the same order), or `x` itself when it already has it."""
        if self.nodes[x.id].shape == tuple(shape):
            return x
        return self.view(x, "reshape", tuple(shape))

    def freeze(self, outputs: Any) -> Graph:
        """The graph; `outputs` is a V or a (nested) tuple of them, stored as node ids."""
        return Graph(tuple(self.nodes), _ids(outputs), tuple(self.effects))


def _ids(value: Any) -> Any:
    if isinstance(value, V):
        return value.id
    return tuple(_ids(v) for v in value)


def _scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) or value is None:
        return value
    raise ValueError(f"not a scalar: {value!r}")


def rewired(graph: Graph, node_id: int, **changes: Any) -> Graph:
    """The graph with one node replaced (same id)."""
    nodes = list(graph.nodes)
    nodes[node_id] = replace(nodes[node_id], **changes)
    return replace(graph, nodes=tuple(nodes))
