"""Which nodes share a kernel: the fusion pass, from the IR to a schedule of kernels and host steps.

Rules, in the order they are tried for each node:
- a GEMM (Triton) or convolution (Triton) anchors a kernel; pointwise work on its output joins it as the epilogue;
- a scan (cumsum, cumprod) is a kernel of its own, its input and output in memory;
- a reduction joins the kernel that computes its input when that kernel walks the same domain and reduces the same
  axes (softmax's max and sum, a norm's two sums), else it starts a row kernel of its own;
- pointwise work joins the kernel of its inputs when its shape broadcasts to that kernel's domain, and kernels of
  the same domain that feed it are merged (a KL divergence's two softmaxes become one pass);
- views and library calls run on the host; a value crossing a host step is stored.
A node never joins a kernel it also depends on through a host step (that would be a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.expert.ir import Graph, Node
from pipeline.expert.options import Options


@dataclass(frozen=True)
class Kernel:
    kind: str  # row (pointwise when raxes is empty), gemm, conv, scan
    anchor: int | None  # the matmul, conv or scan node of a gemm/conv/scan kernel
    nodes: tuple[int, ...]  # pointwise and reduce nodes, in order (a gemm/conv kernel's epilogue)
    domain: tuple[int, ...]
    raxes: tuple[int, ...]  # reduced axes of the domain (row kernels)
    outputs: tuple[int, ...]  # values stored (used outside the kernel, returned, or written into a buffer)
    loads: tuple[int, ...]  # values read from memory (inputs, parameters, host results, other kernels' outputs)


@dataclass(frozen=True)
class HostStep:
    node: int


@dataclass(frozen=True)
class Schedule:
    graph: Graph
    steps: tuple  # HostStep | Kernel, in execution order

    def kernels(self) -> list[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]


@dataclass
class _Group:
    kind: str
    anchor: int | None
    domain: tuple[int, ...]
    raxes: tuple[int, ...] | None  # None: no reduction yet
    nodes: list[int] = field(default_factory=list)


def conv_supported(node: Node) -> bool:
    return node.op == "conv" and node.attr("groups") == 1 and len(node.shape) == 4


def schedule(graph: Graph, options: Options) -> Schedule:
    return _Fuser(graph, options).run()


class _Fuser:
    def __init__(self, graph: Graph, options: Options) -> None:
        self.graph, self.options = graph, options
        self.groups: list[_Group | None] = []
        self.owner: dict[int, int] = {}
        self.host: list[int] = []

    def run(self) -> Schedule:
        live = self.live = self.graph.live()
        self.users = self.graph.users()
        for node in self.graph.nodes:
            if node.id in live:
                self.place(node)
        self.merge_siblings()
        return Schedule(self.graph, tuple(self.order(live)))

    def merge_siblings(self) -> None:
        """Row kernels walking the same domain and reducing the same axes, that read a common input and do not
        depend on each other, become one (a norm's sum of x and sum of x*x read x once)."""
        for target in range(len(self.groups)):
            for source in range(target + 1, len(self.groups)):
                t, s = self.groups[target], self.groups[source]
                if t is None or s is None or t.kind != "row" or s.kind != "row":
                    continue
                if (t.domain, t.raxes) != (s.domain, s.raxes) or t.raxes is None or not self._share_input(t, s):
                    continue
                if not self._between(source, target) and not self._between(target, source) and not self._reads_from(source, target) \
                        and not self._reads_from(target, source):
                    self._merge(source, target)

    def _share_input(self, a: _Group, b: _Group) -> bool:
        inside = set(a.nodes) | set(b.nodes)
        reads = lambda g: {i for n in g.nodes for i in self.graph.node(n).inputs if i not in inside}  # noqa: E731
        return bool(reads(a) & reads(b))

    def _reads_from(self, reader: int, written: int) -> bool:
        """Does a node of `reader` read a value `written` computes (directly)?"""
        return any(self.owner.get(i) == written for n in self.groups[reader].nodes for i in self.graph.node(n).inputs)

    # placement ----------------------------------------------------------------------------------------------------

    def place(self, node: Node) -> None:
        if node.op in ("input", "param", "iota"):
            return  # leaves: loaded (or, for iota, computed) where they are used
        if node.op in ("view", "library"):
            self.host.append(node.id)
        elif node.op == "matmul":
            self._anchor(node, "gemm") if self.options.gemm == "triton" else self.host.append(node.id)
        elif node.op == "conv":
            self._anchor(node, "conv") if self.options.conv == "triton" and conv_supported(node) else self.host.append(node.id)
        elif node.op == "scan":
            self._new(_Group("scan", node.id, node.shape, (node.attr("axis"),), [node.id]))  # a kernel of its own, no epilogue
        elif node.op == "reduce":
            self.place_reduce(node)
        else:
            self.place_pointwise(node)

    def _anchor(self, node: Node, kind: str) -> None:
        self._new(_Group(kind, node.id, node.shape, None, [node.id]))

    def _new(self, group: _Group) -> None:
        self.groups.append(group)
        for n in group.nodes:
            self.owner[n] = len(self.groups) - 1

    def _input_groups(self, node: Node) -> list[int]:
        counts: dict[int, int] = {}
        for i in node.inputs:
            if i in self.owner:
                counts[self.owner[i]] = counts.get(self.owner[i], 0) + 1
        anchored = lambda g: self.groups[g].anchor is not None  # noqa: E731
        return sorted(counts, key=lambda g: (-counts[g], not anchored(g), self.groups[g].raxes is None, g))

    def place_pointwise(self, node: Node) -> None:
        candidates = self._input_groups(node)
        if self._feeds_reductions_only(node):  # computed where it is reduced, not stored by a GEMM's epilogue
            candidates = [g for g in candidates if self.groups[g].anchor is None]
        for g in candidates:
            if self.groups[g].kind == "scan":
                continue
            if self._fits(node.shape, self.groups[g]) and not self._cycle(node, g):
                self._join(node, g)
                for other in candidates:
                    if other != g and self.groups[other] is not None and self._mergeable(other, g):
                        self._merge(other, g)
                return
        self._new(_Group("row", None, node.shape, None, [node.id]))

    def _feeds_reductions_only(self, node: Node) -> bool:
        users = [u for u in self.users[node.id] if u in self.live]
        return bool(users) and all(self.graph.node(u).op == "reduce" for u in users) and node.id not in self.graph.output_ids()

    def place_reduce(self, node: Node) -> None:
        source = node.args[0].id
        axes = tuple(node.attr("axes"))
        shape = self.graph.node(source).shape
        g = self.owner.get(source)
        group = self.groups[g] if g is not None else None
        fits = group is not None and group.kind == "row" and (
            (group.raxes is None and _broadcasts(group.domain, shape)) or (group.raxes == axes and group.domain == shape))
        if fits and not self._cycle(node, g):
            group.domain, group.raxes = shape, axes
            self._join(node, g)
            return
        self._new(_Group("row", None, shape, axes, [node.id]))

    def _join(self, node: Node, g: int) -> None:
        group = self.groups[g]
        if group.kind == "row" and group.raxes is None:
            group.domain = _broadcast(group.domain, node.shape)
        group.nodes.append(node.id)
        self.owner[node.id] = g

    def _fits(self, shape: tuple[int, ...], group: _Group) -> bool:
        if group.kind == "row" and group.raxes is None:
            return _broadcast(group.domain, shape) is not None
        return _broadcasts(shape, group.domain)

    def _mergeable(self, source: int, target: int) -> bool:
        """`source`'s nodes can be computed inside `target` (same domain and reduction, or pointwise work that
        broadcasts to it), with no path between the two through a host step."""
        s, t = self.groups[source], self.groups[target]
        if s.kind != "row" or t.kind == "scan":
            return False
        if s.raxes is not None:
            if t.kind != "row" or (t.raxes is not None and t.raxes != s.raxes) or not _broadcasts(t.domain, s.domain):
                return False
        elif not self._fits(s.domain, t):
            return False
        return not self._between(source, target) and not self._between(target, source)

    def _merge(self, source: int, target: int) -> None:
        s, t = self.groups[source], self.groups[target]
        if s.raxes is not None:
            t.domain, t.raxes = s.domain, s.raxes
        elif t.kind == "row" and t.raxes is None:
            t.domain = _broadcast(t.domain, s.domain)
        t.nodes = sorted(t.nodes + s.nodes)
        for n in s.nodes:
            self.owner[n] = target
        self.groups[source] = None

    def _cycle(self, node: Node, g: int) -> bool:
        """Would computing `node` in group g need a value that itself needs g to finish first?"""
        return any(self.owner.get(i) != g and self._needs(i, g, set()) for i in node.inputs)

    def _between(self, source: int, target: int) -> bool:
        """Does some node of `source` read (through nodes outside both) a value that needs `target`?"""
        inside = set(self.groups[source].nodes) | set(self.groups[target].nodes)
        return any(i not in inside and self._needs(i, target, set()) for n in self.groups[source].nodes
                   for i in self.graph.node(n).inputs)

    def _needs(self, node_id: int, g: int, seen: set[int]) -> bool:
        """Does `node_id`, or anything it is computed from, belong to group g? (A walk with a stack of its own: a
        deep network, ResNet-101's thousands of nodes in one chain, is deeper than Python's recursion limit.)"""
        stack = [node_id]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if self.owner.get(current) == g:
                return True
            stack.extend(self.graph.node(current).inputs)
        return False

    # ordering -----------------------------------------------------------------------------------------------------

    def kernels(self, live: set[int]) -> dict[int, Kernel]:
        users = self.graph.users()
        outputs = set(self.graph.output_ids()) | {e.value for e in self.graph.effects}
        made: dict[int, Kernel] = {}
        for g, group in enumerate(self.groups):
            if group is None:
                continue
            members = set(group.nodes)
            stored = [n for n in group.nodes if n in outputs or any(u in live and u not in members for u in users[n])]
            loads = sorted({i for n in group.nodes for i in self.graph.node(n).inputs
                            if i not in members and self.graph.node(i).op != "iota"})
            epilogue = [n for n in group.nodes if n != group.anchor]
            made[g] = Kernel(group.kind, group.anchor, tuple(epilogue), group.domain, tuple(group.raxes or ()), tuple(stored), tuple(loads))
        return made

    def order(self, live: set[int]) -> list:
        """Steps in dependency order (Kahn), ties broken by the earliest node, so the order is deterministic."""
        kernels = self.kernels(live)
        steps: dict[tuple[str, int], object] = {("host", n): HostStep(n) for n in self.host}
        steps.update({("kernel", g): k for g, k in kernels.items()})
        producer: dict[int, tuple[str, int]] = {n: ("host", n) for n in self.host}
        for g, k in kernels.items():
            for n in (*k.nodes, *([k.anchor] if k.anchor is not None else [])):
                producer[n] = ("kernel", g)
        needs: dict[tuple[str, int], set] = {}
        for key in steps:
            reads = self._reads(key, kernels)
            needs[key] = {producer[i] for i in reads if i in producer and producer[i] != key}
        first = {key: (key[1] if key[0] == "host" else min((*kernels[key[1]].nodes, kernels[key[1]].anchor or 10**9))) for key in steps}
        ordered, done = [], set()
        while len(ordered) < len(steps):
            ready = [k for k in steps if k not in done and needs[k] <= done]
            if not ready:
                raise RuntimeError("the fusion pass made a cycle")  # _cycle and _between rule this out
            key = min(ready, key=lambda k: first[k])
            done.add(key)
            ordered.append(steps[key])
        return ordered

    def _reads(self, key: tuple[str, int], kernels: dict[int, Kernel]) -> list[int]:
        if key[0] == "host":
            return list(self.graph.node(key[1]).inputs)
        return list(kernels[key[1]].loads)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    from pipeline.expert.ir import broadcast_shape

    try:
        return broadcast_shape(a, b)
    except ValueError:
        return None


def _broadcasts(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    """`shape` broadcasts to `domain` without growing it."""
    return len(shape) <= len(domain) and _broadcast(shape, domain) == tuple(domain)
