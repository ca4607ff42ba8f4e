"""The expert backend: the three agent roles by rules, templates and search, with no model.

- Code role, stage 1: the problem is captured (pipeline.expert.capture), decomposed into a small IR and lowered by
  structurally different paradigms (pipeline.expert.seeds); the expert transformations are exact rewrites of the
  IR (pipeline.expert.algebra).
- Profile role: rules over the profiler's report (pipeline.expert.diagnosis), each fix tied to its evidence.
- Code role, stage 2: the diagnosed fixes mapped onto structural variants (pipeline.expert.variants); the numbers
  go to the tuning engine as tunables.
- Debug role: known repairs from the verdict (pipeline.expert.repairs).
Every answer is a deterministic function of the call's arguments and the problem, so a session replayed in another
process gets the same proposals. Stage 2's calls see only the kernel, whose record line names its problem by
fingerprint: the problem is the one the backend was built for (or was shown by an earlier call), else the capture
cache's. A proposal's rationale names the rule that made it. A rejected proposal is never offered again: the next
alternative is, or NoProposal says why.
"""

from __future__ import annotations

from collections.abc import Callable
from textwrap import shorten
from typing import Any

from pipeline.agents.backend import VERDICT_NOTE, Measurements, NoProposal
from pipeline.agents.replies import DebugReply, Diagnosis, KernelReply, Tunable
from pipeline.expert.algebra import TRANSFORMS
from pipeline.expert.lowering import Lowered, Lowering
from pipeline.expert.record import body, read
from pipeline.problems.loader import fingerprint_text
from pipeline.types import EvalResult

RULE_WHY = {
    "identity_removal": "x * 1, x + 0, casts to the same dtype and repeated relu removed",
    "log_of_softmax": "log(softmax(x)) computed as log_softmax(x): no quotient, exact where softmax underflows",
    "bias_before_batch_norm": "a bias constant over batch norm's reduced axes cancels in training mode: dropped",
    "sum_of_linear": "a sum over a GEMM's output columns is a matrix-vector product with pre-summed weights",
    "reshape_sinking": "pointwise work moved before a reshape of a computed value, so it fuses into that kernel",
}


def rejections(feedback: str) -> int:
    """How many proposals for this step a reviewer has rejected (each rejection adds a line of feedback; a line
    about an earlier verdict guides the step but rejected nothing of it)."""
    return len(_steps(feedback)[1])


def _steps(feedback: str) -> tuple[list[str], list[str]]:
    """The feedback's lines about earlier verdicts of the stage, and its rejections of this step, in order."""
    lines = [line for line in feedback.splitlines() if line.strip()]
    return [line for line in lines if line.startswith(VERDICT_NOTE)], [line for line in lines if not line.startswith(VERDICT_NOTE)]


def _tunables(pairs) -> list[Tunable]:
    return [Tunable(name=name, values=list(values)) for name, values in pairs if len(values) > 1]


class ExpertBackend:
    """Backend with no model (pipeline.agents.backend.Backend)."""

    name = "expert"
    proposes_kernels = True
    empty_is_final = True  # the rules' NoProposal is deterministic: no gate for it (unless it answers a rejection)

    def __init__(self, problem_source: str | None = None) -> None:
        self._problems: dict[str, str] = {}  # fingerprint -> source, of every problem this backend was shown
        if problem_source is not None:
            self._know(problem_source)

    def _know(self, problem_source: str) -> str:
        self._problems[fingerprint_text(problem_source)] = problem_source
        return problem_source

    def _problem(self, fingerprint: str) -> Lowering | NoProposal | None:
        """The problem a kernel's record names: one this backend knows, else one this machine captured before."""
        if fingerprint in self._problems:
            return _lowering(self._problems[fingerprint])
        return Lowering.from_cache(fingerprint)

    # stage 1 --------------------------------------------------------------------------------------------------------

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> KernelReply | NoProposal:
        from pipeline.expert.seeds import alternatives

        return _guarded("seed", lambda: self._seed(self._know(problem_source), index, feedback, alternatives))

    def _seed(self, problem_source: str, index: int, feedback: str, alternatives) -> KernelReply | NoProposal:
        """Seed `index`'s proposal after the rejections in `feedback` (one line each): each rejection is answered by
        the first proposal its feedback allows that this seed has not shown yet (the same paradigm with the
        reviewer's bounds written in, then the paradigms after it)."""
        lowering = _lowering(problem_source)
        if isinstance(lowering, NoProposal):
            return lowering
        found, notes = alternatives(lowering)
        context, lines = _steps(feedback)
        shown: set[str] = set()
        for r in range(len(lines) + 1):
            reply = self._seed_after(lowering, found, notes, index, "\n".join(context + lines[:r]), shown)
            if r == len(lines) or isinstance(reply, NoProposal):
                return reply
            shown.add(body(reply.kernel))
        raise AssertionError("unreachable")

    def _seed_after(self, lowering: Lowering, found: list, notes: list[str], index: int, feedback: str,
                    shown: set[str]) -> KernelReply | NoProposal:
        from pipeline.expert.steering import read_feedback

        steer = read_feedback(feedback)
        usable = [c for c in found if not PARADIGM_TOPICS.get(c.paradigm.name, set()) & steer.avoid]
        own, before = usable[index - 1:], usable[: index - 1]
        liked = lambda c: not (PARADIGM_TOPICS.get(c.paradigm.name, set()) & steer.prefer)  # noqa: E731
        for choice in sorted(own, key=liked) + sorted(before, key=liked):
            options = _record_options(choice.lowered.source)
            steered = options.but(pins=_pins(steer), precision="ieee" if steer.exact_fp32 else options.precision)
            lowered = choice.lowered
            if steered != options:
                try:
                    lowered = lowering.lower(steered)
                except ValueError:
                    continue
                if lowering.delegates(lowered):
                    continue
            if body(lowered.source) in shown or (choice in before and body(lowered.source) == body(choice.lowered.source)):
                continue  # shown already, or another seed's kernel unchanged
            rules = ", ".join(lowered.written.rules)
            why = f"rule {choice.paradigm.name}: {choice.paradigm.why}. Lowering rules applied: {rules}."
            if choice.skipped:
                why += f" Passed over: {'; '.join(choice.skipped)}."
            why += _steer_report(steer, choice.lowered.source, lowered.source)
            return KernelReply(paradigm=choice.paradigm.name, rationale=why, tunables=_tunables(lowered.written.tunables),
                               kernel=lowered.source)
        passed = f" ({'; '.join(notes)})" if notes else ""
        if not rejections(feedback):
            return NoProposal(f"no further seed: the expert has {len(found)} distinct paradigm(s) for this problem{passed}")
        return NoProposal(f"no other seed: the expert has {len(found)} distinct paradigm(s) for this problem{passed}, and none "
                          f"it has not shown that the feedback allows.{steer.report()} Write a kernel here, or reject with "
                          f"feedback the rules act on (a bound such as XBLOCK>1 or BLOCK_N=128, 'no split-K', 'exact fp32').")

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> KernelReply | NoProposal:
        return _guarded("transform", lambda: self._transform(self._know(problem_source), kernel, feedback))

    def _transform(self, problem_source: str, kernel: str, feedback: str) -> KernelReply | NoProposal:
        record = read(kernel)
        if record is None:
            return NoProposal("not written by the expert backend (no egg-expert record line): no transformation rule reads it")
        if rejections(feedback):
            return NoProposal("the transformation was rejected; the rules have no other for this seed")
        if record.options.algebra:
            return NoProposal("this kernel already has every expert transformation that applies")
        lowering = _lowering(problem_source)
        if isinstance(lowering, NoProposal):
            return lowering
        lowered = lowering.lower(record.options.but(algebra=True))
        if not lowered.rewrites:
            return NoProposal(f"no expert transformation applies to this graph (checked: {', '.join(n for n, _ in TRANSFORMS)})")
        if lowering.delegates(lowered) or body(lowered.source) == body(kernel):
            return NoProposal("the transformed graph lowers to the same kernels")
        why = "; ".join(f"rule {r}: {RULE_WHY.get(r, r)}" for r in lowered.rewrites)
        return KernelReply(paradigm=f"{record.options.paradigm} + transformations", rationale=why + ".",
                           tunables=_tunables(lowered.written.tunables), kernel=lowered.source)

    # stage 2 --------------------------------------------------------------------------------------------------------

    def diagnose(self, kernel: str, measurements: Measurements, stage: str, objective: str, feedback: str = "") -> Diagnosis | NoProposal:
        from pipeline.expert.diagnosis import diagnose_kernel

        return _guarded("diagnose", lambda: diagnose_kernel(kernel, measurements, stage, feedback))

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal:
        return _guarded("rewrite", lambda: self._rewrite(kernel, stage, diagnosis, feedback))

    def _rewrite(self, kernel: str, stage: str, diagnosis: Diagnosis, feedback: str) -> KernelReply | NoProposal:
        """The proposal after the rejections in `feedback`: each is answered by the first offer its feedback allows
        that was not shown yet (the plan's variants, the reviewer's bounds written into each, then the numbers)."""
        record = read(kernel)
        if record is None:
            return _rewrite_any(kernel, stage, feedback)
        lowering = self._problem(record.problem)
        if lowering is None:
            return NoProposal("the problem this kernel was made for is neither this session's nor in this machine's capture "
                              "cache ($EGG_CACHE/expert)")
        if isinstance(lowering, NoProposal):
            return lowering
        context, lines = _steps(feedback)
        shown: set[str] = set()
        for r in range(len(lines) + 1):
            reply = self._rewrite_after(kernel, record, lowering, stage, diagnosis, "\n".join(context + lines[:r]), shown)
            if r == len(lines) or isinstance(reply, NoProposal):
                return reply
            shown.add(body(reply.kernel) + repr(reply.tunables))

    def _rewrite_after(self, kernel: str, record, lowering: Lowering, stage: str, diagnosis: Diagnosis, feedback: str,
                       shown: set[str]) -> KernelReply | NoProposal:
        from pipeline.expert.steering import read_feedback
        from pipeline.expert.variants import facts, planned, tunables_for

        steer = read_feedback(feedback)
        base = record.options.but(pins=_merged_pins(record.options.pins, _pins(steer)))
        known = facts(lowering, base)
        order, note = planned(stage, diagnosis, steer.avoid, steer.prefer)
        offers: list[tuple[str, str, Lowered, str]] = []
        current = lowering.lower(base)  # the kernel as it is, with the reviewer's bounds
        if base != record.options and body(current.source) != body(kernel):
            offers.append(("reviewer_bounds", "the kernel as it is, with the reviewer's bounds written into its launches",
                           current, "row" if not known.gemms else "gemm"))
        seen = {body(kernel)} | {body(o[2].source) for o in offers}  # a variant that changes only the record line is no variant
        for variant in order:
            options = variant.make(base, known)
            if options is None or options == base:
                continue
            try:
                lowered = lowering.lower(options)
            except ValueError:
                continue
            if lowering.delegates(lowered) or body(lowered.source) in seen:
                continue
            seen.add(body(lowered.source))
            offers.append((variant.name, variant.why, lowered, variant.target))
        missed = [v.name for v in order if v.name not in {o[0] for o in offers}]
        note += f"; {', '.join(missed)} {'does' if len(missed) == 1 else 'do'} not apply to this kernel" if missed else ""
        said = (f" ({note})" if note else "")
        for name, why, lowered, target in offers:
            tunables = _kept(steer, tunables_for(stage, lowered.written.tunables_of(target)))
            if body(lowered.source) + repr(_tunables(tunables)) in shown:
                continue
            searched = f"; the tuning engine searches {', '.join(n for n, _ in tunables)}" if tunables else ""
            return KernelReply(paradigm=record.options.paradigm, rationale=f"rule {name}: {why}{searched}.{said}"
                               + _steer_report(steer, kernel, lowered.source), tunables=_tunables(tunables), kernel=lowered.source)
        tunables = _kept(steer, tunables_for(stage, current.written.tunables))
        if tunables and body(current.source) + repr(_tunables(tunables)) not in shown:
            return KernelReply(paradigm=record.options.paradigm, tunables=_tunables(tunables), kernel=current.source,
                               rationale=f"rule tune_only: no structural variant for {stage} is left{said}; the same kernel, and the "
                                         f"tuning engine searches {', '.join(n for n, _ in tunables)}." + _steer_report(steer, kernel, current.source))
        return NoProposal(f"no further {stage} variant for this kernel ({len(offers)} offered{'; ' + note if note else ''})."
                          + steer.report() + (" Write a kernel here, or reject with feedback the rules act on (a bound such as "
                                              "XBLOCK>1, 'no split-K')." if feedback.strip() else ""))

    # debugging ------------------------------------------------------------------------------------------------------

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> DebugReply | NoProposal:
        return _guarded("repair", lambda: self._repair(kernel, verdict, self._know(problem_source), rejections(feedback)))

    def _repair(self, kernel: str, verdict: EvalResult, problem_source: str, rejected: int) -> DebugReply | NoProposal:
        from pipeline.expert.repairs import candidates

        record = read(kernel)
        lowering = _lowering(problem_source) if record is not None else None
        if isinstance(lowering, NoProposal):
            lowering = None
        usable: list[tuple[str, str, str]] = []
        for repair in candidates(kernel, verdict, record.options if record and lowering else None):
            source = repair.source
            if repair.options is not None:
                try:
                    lowered = lowering.lower(repair.options)
                except ValueError:  # that lowering leaves nothing for Triton: not a repair
                    continue
                if lowering.delegates(lowered):
                    continue
                source = lowered.source
            if source != kernel and source not in (u[2] for u in usable):
                usable.append((repair.rule, repair.cause, source))
        if rejected < len(usable):
            rule, cause, source = usable[rejected]
            return DebugReply(cause=f"rule {rule}: {cause} (verdict: {verdict.status.value}: {shorten(verdict.reason, 400, placeholder=' ...')})", kernel=source)
        return NoProposal(f"no known repair left for {verdict.status.value}: {shorten(verdict.reason, 400, placeholder=' ...')}")


# the topics of the steering vocabulary (pipeline.expert.steering) each paradigm stands for
PARADIGM_TOPICS = {"library_core": {"library"}, "library_streaming": {"library", "streamed_rows"},
                   "streaming_exact": {"streamed_rows"}, "fused_triton": {"rows_in_registers"}}


def _record_options(source: str):
    record = read(source)
    assert record is not None, "the expert's own lowering always writes its record line"
    return record.options


def _pins(steer) -> tuple[tuple[str, str, int], ...]:
    return tuple((b.name, b.op, b.value) for b in steer.bounds)


def _merged_pins(old: tuple, new: tuple) -> tuple:
    """Earlier pins with the new ones added; a new bound with the same name and operator replaces the old."""
    keys = {(n, op) for n, op, _ in new}
    return tuple(p for p in old if (p[0], p[1]) not in keys) + new


def _kept(steer, pairs) -> list[tuple[str, tuple[int, ...]]]:
    from pipeline.expert.steering import keeps

    kept = [(name, keeps(steer.bounds, name, tuple(values))) for name, values in pairs]
    return [(name, values) for name, values in kept if len(values) > 1]


def _rewrite_any(kernel: str, stage: str, feedback: str) -> KernelReply | NoProposal:
    """Stage 2 for a kernel no template describes (a person's, a model's): the reviewer's bounds written into its
    launches, and the block sizes and launch options its launches pass as numbers handed to the tuning engine."""
    from pipeline.expert.steering import honour_bounds, ladder, launched_kernels, read_feedback

    steer = read_feedback(feedback)
    kernels = launched_kernels(kernel)
    if not kernels:
        return NoProposal("no @triton.jit kernel launched as kernel[grid](...) in this file: no rule reads it")
    target = max(kernels, key=lambda k: len(k.values))
    knobs = {"parallel_mapping": lambda n: n not in ("num_warps", "num_stages"), "tiling": lambda n: n != "num_stages",
             "memory": lambda n: n in ("num_warps", "num_stages") or not target.loops}.get(stage, lambda n: True)
    source, changes, cannot = honour_bounds(kernel, steer.bounds)
    tunables = _kept(steer, [(n, v) for n, v in ladder(target) if knobs(n)])
    if rejections(feedback) and source == kernel:
        return NoProposal(f"no other {stage} move for a kernel no template describes (it has no egg-expert record line): "
                          f"the rules read only its launches.{steer.report()} Write a kernel here, or reject with a bound such as "
                          f"{next(iter(target.constexprs), 'num_warps')}>1.")
    if not tunables and source == kernel:
        return NoProposal(f"nothing for {stage} to search in {target.name}: its launches pass no block size or launch option as a number")
    passed = ", ".join(f"{n}={v}" for n, v in target.values.items()) or "no literal values"
    searched = f"; the tuning engine searches {', '.join(n for n, _ in tunables)}" if tunables else ""
    return KernelReply(paradigm=None, tunables=_tunables(tunables), kernel=source,
                       rationale=f"rule launch_numbers: a kernel no template describes; {target.name}'s launches pass {passed}{searched}."
                                 + _steer_report(steer, kernel, source))


def _steer_report(steer, before: str, after: str) -> str:
    """What the feedback changed in the kernel, and what of it could not be acted on."""
    from pipeline.expert.steering import honour_bounds

    if not steer.clauses:
        return ""
    _, changes, cannot = honour_bounds(before, steer.bounds)
    said = steer.report()
    if changes:
        said += f" Written into the launches: {'; '.join(changes)}."
    if cannot:
        said += f" Bound(s) not applied: {'; '.join(cannot)}."
    if steer.exact_fp32 and "tf32" in before and body(before) == body(after):
        said += " exact fp32: this kernel has no tl.dot, so it is exact fp32 already."
    return said


def _lowering(problem_source: str) -> Lowering | NoProposal:
    from pipeline.expert.capture import CaptureError
    from pipeline.expert.decompose import Unsupported
    from pipeline.expert.host import SourceError

    try:
        return Lowering.of(problem_source)
    except (CaptureError, Unsupported, SourceError) as error:
        return NoProposal(f"the expert backend cannot lower this problem: {error}"[:400])


def _guarded(role: str, call: Callable[[], Any]) -> Any:
    """A failure inside the rules becomes a NoProposal naming it (the session goes on), never an exception."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - a backend answers every call; the reason is shown at the gate
        return NoProposal(f"the expert backend's {role} rules failed: {type(error).__name__}: {error}"[:400])

