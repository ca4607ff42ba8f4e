"""A problem, captured and decomposed once, lowered to a candidate file under given options.

This is where the pieces meet: capture (pipeline.expert.capture) -> IR (decompose) -> exact rewrites (algebra, when
the options ask) -> fusion (schedule) -> source (candidate). It also predicts the judge's delegation rule: a
lowering that would leave every compute op of the reference in torch is not offered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.expert.capture import Captured, capture, cached
from pipeline.expert.candidate import Written, rules_of, write
from pipeline.expert.decompose import decompose
from pipeline.expert.fusion import HostStep, Schedule, schedule
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

    def __init__(self, problem_source: str, captured: Captured) -> None:
        self.problem_source, self.captured = problem_source, captured
        self.graph: Graph = decompose(captured.tape)

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
        from pipeline.expert.algebra import lower_rules, simplify

        graph, rewrites = simplify(self.graph, options) if options.algebra else (self.graph, [])
        graph, lowered = lower_rules(graph, options)  # after the rewrites: a split would hide their patterns
        plan = schedule(graph, options)
        rules = tuple(dict.fromkeys([*rules_of(plan, options), *lowered, *rewrites]))
        record = Record(self.captured.fingerprint, options, rules)
        written = write(self.problem_source, plan, options, record)
        if options.pins:
            written = _pinned(written, options.pins)
        return Lowered(written, plan, tuple(rewrites), kept_ops(plan))

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
