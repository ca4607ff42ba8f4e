"""A problem, captured and decomposed once, lowered to a candidate file under given options.

This is where the pieces meet: capture (pipeline.expert.capture) -> IR (decompose) -> exact rewrites (algebra, when
the options ask) -> fusion (schedule) -> source (candidate). It also predicts the judge's delegation rule: a
lowering that would leave every compute op of the reference in torch is not offered.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from pipeline.expert.capture import Captured, capture, capture_family, cached
from pipeline.expert.candidate import Written, rules_of, write
from pipeline.expert.decompose import decompose
from pipeline.expert.fusion import HostStep, Schedule, schedule
from pipeline.expert.general import Generalised, generalise, other_sizes, sized_source
from pipeline.expert.ir import Graph
from pipeline.expert.options import Options
from pipeline.expert.record import Record


@dataclass(frozen=True)
class Lowered:
    written: Written
    schedule: Schedule
    rewrites: tuple[str, ...]  # the exact rewrites that changed the graph
    kept_ops: frozenset[str]  # aten compute ops the candidate still runs in torch

    @property
    def source(self) -> str:
        return self.written.source


class Lowering:
    """One problem, ready to be lowered any number of ways (deterministically)."""

    def __init__(self, problem_source: str, captured: Captured, *, general: bool = True) -> None:
        self.problem_source, self.captured = problem_source, captured
        self.graph: Graph = decompose(captured.tape)
        self.general = general  # write seeds general in the leading size (pipeline.expert.general)
        self._sized: list[tuple[int, Lowering]] | None = None
        self._general: dict[Options, Generalised] = {}

    @classmethod
    def of(cls, problem_source: str) -> Lowering:
        """Raises CaptureError, Unsupported (decompose) or SourceError (host)."""
        return cls(problem_source, capture(problem_source))

    @classmethod
    def from_cache(cls, fingerprint: str) -> Lowering | None:
        """The problem a record names, when this machine captured it before (None otherwise)."""
        found = cached(fingerprint)
        return cls(found[1], found[0]) if found is not None else None

    @property
    def ref_ops(self) -> frozenset[str]:
        return frozenset(self.captured.tape.ref_ops)

    def lower(self, options: Options) -> Lowered:
        written, plan, rewrites = self._written(options)
        if self.general:
            general = self.generalised(options, written.source)
            written = dataclasses.replace(written, source=general.source)
        if options.pins:
            written = _pinned(written, options.pins)
        return Lowered(written, plan, tuple(rewrites), kept_ops(plan))

    def _written(self, options: Options) -> tuple[Written, Schedule, list[str]]:
        from pipeline.expert.algebra import lower_rules, simplify

        graph, rewrites = simplify(self.graph, options) if options.algebra else (self.graph, [])
        graph, lowered = lower_rules(graph, options)  # after the rewrites: a split would hide their patterns
        plan = schedule(graph, options)
        rules = tuple(dict.fromkeys([*rules_of(plan, options), *lowered, *rewrites]))
        record = Record(self.captured.fingerprint, options, rules)
        return write(self.problem_source, plan, options, record), plan, rewrites

    def generalised(self, options: Options, nominal: str | None = None) -> Generalised:
        """The seed under `options` made general in the leading size, or its nominal source and why not."""
        if options in self._general:
            return self._general[options]
        if nominal is None:
            nominal = self._written(options)[0].source
        batch, first = self._batch()
        others = []
        for size, lowering in self._sized_lowerings(batch):
            try:
                others.append((size, lowering._written(options)[0].source))
            except Exception:  # noqa: BLE001 - a size the rules cannot write at: the seed stays specialised
                continue
        largest = None if "tl.int64" in nominal else self._largest_batch(batch)
        result = generalise(nominal, batch, others, first, largest) if first else Generalised(nominal, "no input with a leading size")
        self._general[options] = result
        return result

    def why_specialised(self, source: str) -> str | None:
        """'' when this lowering wrote `source` general in the batch, why not when it kept it specialised, None
        when it never wrote it."""
        found = next((g for g in self._general.values() if g.source == source), None)
        return None if found is None else found.why

    def _largest_batch(self, batch: int) -> int | None:
        """The largest leading size at which every tensor of the forward still has fewer than 2**31 elements (so
        32-bit offsets hold): each tensor's element count at the three sizes, an affine a * B + c, bounds it."""
        counts = [(batch, _counts(self.graph))] + [(size, _counts(lowering.graph)) for size, lowering in self._sized or []]
        (b0, first), *rest = counts
        if not rest or any(len(c) != len(first) for _, c in rest):
            return batch  # another graph at another size: no larger batch is promised
        largest = None
        for k, n0 in enumerate(first):
            b1, n1 = rest[0][0], rest[0][1][k]
            if (n1 - n0) % (b1 - b0):
                return batch
            a = (n1 - n0) // (b1 - b0)
            c = n0 - a * b0
            if any(a * b + c != ns[k] for b, ns in rest):
                return batch
            if a > 0:
                bound = (2**31 - 1 - c) // a
                largest = bound if largest is None else min(largest, bound)
        return None if largest is None else max(batch, largest)

    def _batch(self) -> tuple[int, str]:
        return batch_of(self.problem_source, self.captured)

    def _sized_lowerings(self, batch: int) -> list[tuple[int, Lowering]]:
        """The problem captured at two other leading sizes (one sandboxed process), as lowerings of their own: every
        input of the batch's size varied, else the first input alone (as the judge's derivations do)."""
        if self._sized is None:
            self._sized = []
            sizes = other_sizes(batch) if batch > 0 else ()
            for shared in (True, False):
                sources = [sized_source(self.problem_source, s, shared) for s in sizes]
                for size, captured in zip(sizes, capture_family(sources)):
                    try:
                        if captured is not None:  # written with the problem's own text (not the sized one)
                            self._sized.append((size, Lowering(self.problem_source, captured, general=False)))
                    except Exception:  # noqa: BLE001 - decomposes at the problem's size only: the seeds stay specialised
                        continue
                if len(self._sized) == len(sizes):
                    break
                self._sized = []
        return self._sized

    def delegates(self, lowered: Lowered) -> bool:
        """Would the judge's torch_delegation rule ban it? Every compute op of the reference still in torch; a
        compute op kept in torch that is no library primitive (the judge allows only a negligible share of those);
        or library primitives kept on a problem that has nothing else to do."""
        from pipeline.judge.probes import LIBRARY_OPS

        kept = lowered.kept_ops
        if self.ref_ops and self.ref_ops <= kept:
            return True
        if {op for op in kept - LIBRARY_OPS if not op.endswith("_")}:  # in place: a buffer's counter (+= 1), negligible
            return True
        return bool(kept) and bool(self.ref_ops) and self.ref_ops <= LIBRARY_OPS


def _counts(graph: Graph) -> list[int]:
    """The element count of every tensor of the graph, in node order."""
    return [math.prod(n.shape) for n in graph.nodes if n.shape is not None]


def batch_of(problem_source: str, captured: Captured) -> tuple[int, str]:
    """The first tensor input's leading size (the one `sized_source` varies), and its name in the seed's forward
    ((0, '') when there is none, or it is no named argument)."""
    from pipeline.expert.graph import TensorMeta
    from pipeline.expert.host import model_parts

    inputs = captured.tape.inputs
    index = next((i for i, v in enumerate(inputs) if isinstance(v, TensorMeta) and len(v.shape) > 0), None)
    args = model_parts(problem_source)[1]
    if index is None or index >= len(args):
        return 0, ""
    return int(inputs[index].shape[0]), args[index]


def prime(problem_sources: list[str]) -> None:
    """Capture the repository's own problems and their variants at other leading sizes (what `Lowering.lower`
    compares a seed with), two child processes for all of them: for trusted problem files only (the suite's)."""
    from pipeline.expert import capture as capturing

    capturing.prime(problem_sources)
    sized = []
    for source in problem_sources:
        found = cached(capturing.fingerprint_text(source))
        batch = batch_of(source, found[0])[0] if found is not None else 0
        sized += [sized_source(source, size) for size in (other_sizes(batch) if batch > 0 else ())]
    capturing.prime(sized)


def _pinned(written: Written, pins: tuple[tuple[str, str, int], ...]) -> Written:
    """The reviewer's bounds written into the launches, and kept by the numbers the tuning engine may search."""
    from pipeline.expert.steering import Bound, honour_bounds, keeps

    bounds = tuple(Bound(*pin) for pin in pins)
    source, _, _ = honour_bounds(written.source, bounds)

    def kept(pairs):
        return tuple((name, keeps(bounds, name, values)) for name, values in pairs if keeps(bounds, name, values))

    by_kind = tuple((kind, kept(pairs)) for kind, pairs in written.by_kind)
    return dataclasses.replace(written, source=source, tunables=kept(written.tunables), by_kind=by_kind)


def kept_ops(plan: Schedule) -> frozenset[str]:
    """The aten compute ops the host steps of a schedule dispatch (as the judge's recorder names them)."""
    ops: set[str] = set()
    for step in plan.steps:
        if not isinstance(step, HostStep):
            continue
        node = plan.graph.node(step.node)
        if node.op == "matmul":
            ops.add("mm" if len(node.shape) == 2 else "bmm")
        elif node.op == "conv":
            ops.add("convolution")
        elif node.op == "library":
            from pipeline.judge.probes import NON_COMPUTE_OPS

            ops.update(op for op in node.attr("aten", ()) if op not in NON_COMPUTE_OPS)
    return frozenset(ops)
