"""Values inside a kernel as Triton source: loads of what the kernel reads (at the kernel's index variables), the
pointwise expressions of the nodes it owns, iotas, and stores into contiguous output buffers. Row kernels, GEMM and
convolution epilogues all write their values through this one class."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.expert.graph import contiguous_strides
from pipeline.expert.indexing import IndexVar, linear_index, mask_of, offset
from pipeline.expert.ir import FLOATS, Graph, Node, V
from pipeline.expert.pointwise import TABLE, operand, triton_expression

TL_DTYPES = {"float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16", "float64": "tl.float64",
             "int64": "tl.int64", "int32": "tl.int32", "int8": "tl.int8", "uint8": "tl.uint8", "bool": "tl.int1"}
HALF = ("float16", "bfloat16")


def rounded_values(graph: Graph) -> frozenset[int]:
    """Nodes whose value eager torch rounds to fp16/bf16, so a kernel computing in fp32 rounds it there too: the
    result of each recorded call (a node whose users come from another call, or an output) and every cast.
    Nodes inside one call's decomposition stay fp32, as torch computes them (a layer norm, a linear's bias add
    in cuBLAS's epilogue). Without this a bf16 linear + SiLU + residual rounds once where torch rounds three times,
    and the difference misses 1e-2 on a few of 134M elements."""
    users = graph.users()
    outputs = set(graph.output_ids())
    return frozenset(n.id for n in graph.nodes if n.dtype in HALF and n.op not in ("input", "param", "view", "reduce")
                     and (n.fn == "cast" or n.id in outputs or any(graph.node(u).origin != n.origin for u in users[n.id])))


@dataclass
class Scope:
    """Lines of one block of kernel code and the values already computed in it."""

    lines: list[str] = field(default_factory=list)
    defined: set[int] = field(default_factory=set)


class ValueWriter:
    """Computes a kernel's values as Triton source: loads of the values it reads, the pointwise expressions of the
    nodes it owns, iotas; `predefined` values (a GEMM's accumulator) are already in registers."""

    def __init__(self, graph: Graph, domain: tuple[int, ...], variables: list[IndexVar], members: set[int],
                 names: dict[int, str], predefined: dict[int, str] | None = None) -> None:
        self.graph, self.domain, self.variables, self.members, self.names = graph, domain, variables, members, names
        self.predefined = predefined or {}
        self.helpers: set[str] = set()
        self.rounded = rounded_values(graph)

    def ptr(self, node_id: int) -> str:
        return f"{self.names[node_id]}_ptr"

    def value(self, node_id: int, scope: Scope) -> str:
        """The register holding `node_id` in this scope, emitting its computation (and loads) first if needed."""
        if node_id in scope.defined:
            return f"t{node_id}"
        node = self.graph.node(node_id)
        if node_id in self.predefined:
            if node_id not in self.rounded:
                return self.predefined[node_id]
            scope.lines.append(f"t{node_id} = {self._round(self.predefined[node_id], node.dtype)}")  # a GEMM's bf16 result
            scope.defined.add(node_id)
            return f"t{node_id}"
        if node_id in self.members and node.op == "window":
            text = self.window(node, scope)
        elif node_id in self.members:
            if node.op == "reduce":
                raise RuntimeError(f"reduction t{node_id} used before its pass")  # passes are ordered so this cannot happen
            operands = [self.value(a.id, scope) if isinstance(a, V) else operand(a) for a in node.args]
            text = triton_expression(node.fn, operands, dict(node.attrs))
            self.helpers.update(TABLE[node.fn].helpers)
            if node.fn == "cast" and node.dtype not in FLOATS:
                text = f"({text}).to({TL_DTYPES[node.dtype]})"
            elif node_id in self.rounded:
                text = self._round(text, node.dtype)
        elif node.op == "iota":
            var = next(v for v in self.variables if node.attr("axis") in v.axes)
            text = linear_index(var.name, [self.domain[a] for a in var.axes], [1 if a == node.attr("axis") else 0 for a in var.axes]) or "0"
        else:
            text = self.load(node)
        scope.lines.append(f"t{node_id} = {text}")
        scope.defined.add(node_id)
        return f"t{node_id}"

    @staticmethod
    def _round(text: str, dtype: str) -> str:
        """An fp32 value rounded to `dtype` and back: registers stay fp32, the value is what torch would hold."""
        return f"({text}).to({TL_DTYPES[dtype]}).to(tl.float32)"

    def load(self, node: Node) -> str:
        off, used = offset(node.shape, node.stride, self.domain, self.variables)
        mask = mask_of(used)
        address = self.ptr(node.id) if off == "0" else f"{self.ptr(node.id)} + {off}"
        text = f"tl.load({address}, mask={mask}, other=0)" if mask else f"tl.load({address})"
        return f"{text}.to(tl.float32)" if node.dtype in ("float16", "bfloat16") else text

    def axis_index(self, axis: int) -> tuple[str, IndexVar]:
        """The expression of the domain's index along `axis` (as an iota computes it), and its index variable."""
        var = next(v for v in self.variables if axis in v.axes)
        return linear_index(var.name, [self.domain[a] for a in var.axes], [1 if a == axis else 0 for a in var.axes]) or "0", var

    def window(self, node: Node, scope: Scope) -> str:
        """A pooling window's element, read from its input: position = out * stride - padding + k * dilation along each
        window axis, the fill value (-inf or 0) outside the input."""
        source = self.graph.node(node.args[0].id)
        kernel, stride, padding, dilation = (node.attr(k) for k in ("kernel", "stride", "padding", "dilation"))
        dims, lead = len(kernel), len(source.shape) - len(kernel)
        terms, inside, used = [], [], []
        for axis in range(lead):
            if source.shape[axis] > 1:
                index, var = self.axis_index(axis)
                terms.append(f"({index}) * {source.stride[axis]}")
                used.append(var)
        for j in range(dims):
            (o, ov), (k, kv) = self.axis_index(lead + j), self.axis_index(lead + dims + j)
            position = f"p{node.id}_{j}"
            scope.lines.append(f"{position} = ({o}) * {stride[j]} - {padding[j]} + ({k}) * {dilation[j]}")
            inside.append(f"({position} >= 0) & ({position} < {source.shape[lead + j]})")
            terms.append(f"{position} * {source.stride[lead + j]}")
            used += [ov, kv]
        mask = " & ".join([*(f"({m})" for m in dict.fromkeys(v.mask for v in used if v.mask)), *inside])
        fill = 'float("-inf")' if node.attr("fill") == float("-inf") else "0.0"
        text = f"tl.load({self.ptr(source.id)} + {' + '.join(terms)}, mask={mask}, other={fill})"
        return f"{text}.to(tl.float32)" if source.dtype in ("float16", "bfloat16") else text

    def store(self, node_id: int, value: str, tile: str | None = None, spans: tuple[IndexVar, ...] = ()) -> str:
        """Store `value` (node_id's register) into its contiguous buffer; `tile` broadcasts a value that is
        constant along some axis the buffer has (a zeros tensor of the full tile). `spans`: index variables the
        value's tile covers even where the buffer has a single element (a GEMM tile wider than N = 1)."""
        node = self.graph.node(node_id)
        off, used = offset(node.shape, contiguous_strides(node.shape), self.domain, self.variables)
        for var in spans:
            if var not in used:
                off, used = f"{off} + 0 * {var.name}", [*used, var]  # the address takes the tile's shape; the mask keeps one lane
        mask = mask_of(used)
        if tile:
            value = f"{value} + {tile}"
        if node.dtype != "float32":
            value = f"({value}).to({TL_DTYPES.get(node.dtype, 'tl.float32')})"
        address = self.ptr(node_id) if off == "0" else f"{self.ptr(node_id)} + {off}"
        return f"tl.store({address}, {value}, mask={mask})" if mask else f"tl.store({address}, {value})"
