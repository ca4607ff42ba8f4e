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
from typing import Any

from pipeline.agents.backend import Measurements, NoProposal
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
    """How many proposals for this step a reviewer has rejected (each rejection adds a line of feedback)."""
    return len([line for line in feedback.splitlines() if line.strip()])


def _tunables(pairs) -> list[Tunable]:
    return [Tunable(name=name, values=list(values)) for name, values in pairs if len(values) > 1]


class ExpertBackend:
    """Backend with no model (pipeline.agents.backend.Backend)."""

    name = "expert"
    proposes_kernels = True

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
        lowering = _lowering(problem_source)
        if isinstance(lowering, NoProposal):
            return lowering
        found, notes = alternatives(lowering)
        position = index - 1 + rejections(feedback)
        if position >= len(found):
            passed = f" ({'; '.join(notes)})" if notes else ""
            return NoProposal(f"no further seed: the expert has {len(found)} distinct paradigm(s) for this problem{passed}")
        choice = found[position]
        rules = ", ".join(choice.lowered.written.rules)
        why = f"rule {choice.paradigm.name}: {choice.paradigm.why}. Lowering rules applied: {rules}."
        if choice.skipped:
            why += f" Passed over: {'; '.join(choice.skipped)}."
        return KernelReply(paradigm=choice.paradigm.name, rationale=why, tunables=_tunables(choice.lowered.written.tunables),
                           kernel=choice.lowered.source)

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

        return _guarded("diagnose", lambda: diagnose_kernel(kernel, measurements, stage, rejections(feedback)))

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal:
        return _guarded("rewrite", lambda: self._rewrite(kernel, stage, diagnosis, rejections(feedback)))

    def _rewrite(self, kernel: str, stage: str, diagnosis: Diagnosis, rejected: int) -> KernelReply | NoProposal:
        from pipeline.expert.variants import facts, ranked, tunables_for

        record = read(kernel)
        if record is None:
            return NoProposal("not written by the expert backend (no egg-expert record line): no variant rule reads it")
        lowering = self._problem(record.problem)
        if lowering is None:
            return NoProposal("the problem this kernel was made for is neither this session's nor in this machine's capture "
                              "cache ($EGG_CACHE/expert)")
        if isinstance(lowering, NoProposal):
            return lowering
        known = facts(lowering, record.options)
        offers: list[tuple[str, str, Lowered, str]] = []
        seen = {body(kernel)}  # a variant that changes only the record line is no variant
        for variant in ranked(stage, diagnosis):
            options = variant.make(record.options, known)
            if options is None or options == record.options:
                continue
            try:
                lowered = lowering.lower(options)
            except ValueError:
                continue
            if lowering.delegates(lowered) or body(lowered.source) in seen:
                continue
            seen.add(body(lowered.source))
            offers.append((variant.name, variant.why, lowered, variant.target))
        if rejected < len(offers):
            name, why, lowered, target = offers[rejected]
            tunables = tunables_for(stage, lowered.written.tunables_of(target))
            searched = f"; the tuning engine searches {', '.join(n for n, _ in tunables)}" if tunables else ""
            return KernelReply(paradigm=record.options.paradigm, rationale=f"rule {name}: {why}{searched}.",
                               tunables=_tunables(tunables), kernel=lowered.source)
        tunables = tunables_for(stage, lowering.lower(record.options).written.tunables)
        if rejected == len(offers) and tunables:
            return KernelReply(paradigm=record.options.paradigm, tunables=_tunables(tunables), kernel=kernel,
                               rationale=f"rule tune_only: no structural variant for {stage} is left; the same kernel, and the "
                                         f"tuning engine searches {', '.join(n for n, _ in tunables)}.")
        return NoProposal(f"no further {stage} variant for this kernel ({len(offers)} offered)")

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
            return DebugReply(cause=f"rule {rule}: {cause} (verdict: {verdict.status.value}: {verdict.reason[:160]})", kernel=source)
        return NoProposal(f"no known repair left for {verdict.status.value}: {verdict.reason[:160]}")


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

