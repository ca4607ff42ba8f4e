"""One problem through the method: seeds (stage 1), then parallel mapping, tiling and memory (stage 2), with a gate
wherever a person may stop the engine: every plan, every proposed kernel, every verdict and every stage's end.

Composes a backend (the agent roles), the judge, the gates and the store; it does no printing itself (progress goes
to a callback) and never ends worse than the reference: only candidates the judge passed are kept, and on the GPU
only faster ones. Re-run over the same store it replays itself: model replies, verdicts, profiles and decisions
come back from the store, so a killed worker reaches the gate it was waiting at with nothing judged twice.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipeline.agents.backend import VERDICT_NOTE, Backend, Measurements, NoProposal
from pipeline.agents.replies import DebugReply, Diagnosis, KernelReply
from pipeline.llm.accounting import Ledger
from pipeline.problems.loader import fingerprint_text, load_candidate, read_source
from pipeline.profiler.report import ProfileReport
from pipeline.sessions.gatekinds import Choice, GatePayload, Heard, KernelPayload, PlanPayload, StageEnd, StageEndPayload, VerdictPayload
from pipeline.sessions.gates import Ruling
from pipeline.stages.method import ALGORITHM, HARDWARE_STAGES, PARADIGMS, Attempt, Budget, Decision, Progress, Stage
from pipeline.store import Store
from pipeline.types import Candidate, EvalOptions, EvalResult, Problem, from_jsonable, to_jsonable

# A rewrite must beat the best by this much to be kept: smaller differences are noise.
MIN_GAIN = 0.01
# A step whose proposal a person rejects is asked again with the feedback, at most this many times.
MAX_REJECTIONS = 3


class Evaluator(Protocol):
    """What the pipeline needs of the judge (pipeline.judge.Judge; tests may script it)."""

    options: EvalOptions

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult: ...


class Gates(Protocol):
    """Where the engine stops for a person (pipeline.sessions.gates.StoreGates)."""

    def ask(self, stage: str, payload: GatePayload, identity: dict[str, Any] | None = None) -> Ruling: ...

    def checkpoint(self) -> None: ...


# Profiles a candidate file against the problem file (pipeline.profiler's ProfileReport).
Profiler = Callable[[str, str], ProfileReport]
# Progress for people: (message, kind, data); the session worker stores each as an event.
EventSink = Callable[..., None]


REVERIFY_MARGIN = 1.25  # the winner's re-verification is taken to need this much of the first check's time


class BudgetExhausted(Exception):
    """Raised before a call that the budget no longer allows; ends the run with the best found so far."""


class StageStopped(Exception):
    """A person stopped the stage: it ends with what it has kept."""


class SessionStopped(Exception):
    """A person stopped the session at a stage's end: no further stage runs."""


@dataclass(frozen=True)
class Proposed:
    """A kernel to judge: the backend's proposal as approved, or a person's edit of it."""

    source: str
    author: str  # the backend's name, or "person"
    note: str = ""  # the rationale (a repair's cause), or who wrote it
    tunables: tuple = ()
    paradigm: str | None = None
    same_as: int | None = None  # the candidate already judged with exactly this source (no gate, its verdict stands)


def verdict_key(options: Any) -> str:
    """The key a stored verdict is kept under: the judge's options and the judge's own code, so a changed judge
    never serves an old verdict for an unchanged candidate."""
    from pipeline.judge.refcache import judge_code_fingerprint

    material = {"options": to_jsonable(options), "judge": judge_code_fingerprint()}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


class Optimizer:
    """Runs the stages for one problem and keeps everything in the store."""

    def __init__(self, problem: Problem, judge: Evaluator, backend: Backend, store: Store, session_id: str, work_dir: Path,
                 gates: Gates, budget: Budget = Budget(), on_event: EventSink = lambda message, kind="info", **data: None,
                 profiler: Profiler | None = None, ledger: Ledger | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.problem, self.judge, self.backend, self.store, self.session_id = problem, judge, backend, store, session_id
        self.work_dir, self.gates, self.budget, self.on_event, self.profiler = work_dir, gates, budget, on_event, profiler
        self.ledger = ledger or Ledger()
        self.problem_source = read_source(problem.path)
        self.progress = Progress()
        self.clock = clock  # wall seconds (a test's clock where the judge is scripted)
        self.started = clock()
        self._baselines_said = False
        self._plans_seen: dict[str, dict[str, Diagnosis | None]] = {}  # per stage: each (plan, kernel) given, and what was followed
        self.first_check_s: float | None = None  # the wall time of this run's first judged check (reference included)
        self.last_check_s: float | None = None
        self.next_check_s: float | None = None  # the next check's expected time: the last one's, less the reference it computed
        self.last_profile_s = 0.0  # the last profile's wall time (before one is taken, a check's is assumed)
        self._feedback: dict[str, list[str]] = {}  # stage -> what reviewers said when rejecting verdicts there
        self._feedback_from: dict[tuple[str, str], str] = {}  # (stage, verdict feedback) -> the gate it was given at
        self.plan_edit: tuple[str, str, str] | None = None  # the last plan's edit, when the reviewer edited it: (gate key, what, text)
        self._calls_seen = 0
        self._judged: dict[str, int] = {}  # source fingerprint -> the candidate that was judged with it
        self._verdicts_rejected: set[int] = set()
        self.options_key = verdict_key(judge.options)
        self.timed = judge.options.device != "cpu" and judge.options.timing

    # the run -------------------------------------------------------------------------------------------------------

    def run(self) -> Progress:
        """Every stage in order, resuming finished ones from the store; stops early when the budget runs out or a
        person stops the session."""
        try:
            for stage in (ALGORITHM, *HARDWARE_STAGES):
                if self._resume_stage(stage):
                    continue
                self.on_event(f"stage {stage.name}: {stage.objective}", "stage", stage=stage.name)
                try:
                    self.seed_stage() if stage is ALGORITHM else self.hardware_stage(stage)
                except StageStopped:
                    self._decide(stage.name, "stopped by the reviewer")
                self.end_stage(stage)
        except BudgetExhausted as why:
            self.progress.stopped = str(why)
            self.on_event(f"budget exhausted: {why}; keeping the best found so far", "budget")
        except SessionStopped:
            self.progress.stopped = "stopped by the reviewer"
            self.on_event("the reviewer stopped the session; keeping the best found so far", "stopped")
        return self.progress

    def _resume_stage(self, stage: Stage) -> bool:
        saved = self.store.stage(self.session_id, stage.name)
        if saved is None or saved[0] != "done":
            return False
        state = saved[1]
        self.progress.best_id, self.progress.best_source, self.progress.best_ms = state["best_id"], state["best_source"], state["best_ms"]
        if state.get("best_result"):
            self.progress.best_result = from_jsonable(EvalResult, state["best_result"])
        self.progress.decisions = [Decision(**d) for d in state["decisions"]]
        self.progress.attempts = [Attempt(**a) for a in state["attempts"]]
        self.progress.stopped = state.get("stopped", "")
        self._verdicts_rejected.update(state.get("verdicts_rejected", []))
        for attempt in self.progress.attempts:
            kept = self.store.candidate_source(attempt.candidate_id)
            if kept is not None:
                self._judged.setdefault(fingerprint_text(kept), attempt.candidate_id)
        self.on_event(f"stage {stage.name}: done in an earlier run, resumed from the store", "stage", stage=stage.name, resumed=True)
        if self.progress.stopped:
            raise SessionStopped()
        return True

    def _checkpoint(self, stage: Stage) -> None:
        p = self.progress
        state = {
            "best_id": p.best_id,
            "best_source": p.best_source,
            "best_ms": p.best_ms,
            "decisions": [dataclasses.asdict(d) for d in p.decisions],
            "attempts": [dataclasses.asdict(a) for a in p.attempts],
            "best_result": to_jsonable(p.best_result) if p.best_result else None,
            "stopped": p.stopped,
            "verdicts_rejected": sorted(self._verdicts_rejected),
        }
        self.store.save_stage(self.session_id, stage.name, "done", state)

    # stage 1 -------------------------------------------------------------------------------------------------------

    def seed_stage(self) -> None:
        """k seeds of different paradigms, each judged (and repaired if it fails), then expert transformations
        applied to each correct seed; the best of all is kept."""
        count = min(self.budget.seeds, len(PARADIGMS))
        correct: list[tuple[str, str, int]] = []  # (source, paradigm, candidate id)
        for index, paradigm in enumerate(PARADIGMS[:count], start=1):
            proposed = self.propose(ALGORITHM.name, "seed", lambda fb: self.backend.seed(self.problem_source, paradigm, index, count, fb),
                                    parent_id=None, parent_source=self.problem_source, label=f"seed {index} of {count}")
            if proposed is None:
                continue
            cid, result, source = self.consider(proposed, ALGORITHM.name, "seed", None, note=proposed.paradigm or "")
            if result.ok:
                correct.append((source, proposed.paradigm or paradigm, cid))
        for source, paradigm, cid in correct if self.budget.transforms else []:
            self.propose_and_consider(ALGORITHM.name, "transform", lambda fb, s=source, p=paradigm: self.backend.transform(self.problem_source, s, p, fb),
                                      parent_id=cid, parent_source=source, label=f"transformation of candidate {cid}")
        self._decide(ALGORITHM.name, "best seed" if self.progress.best_id is not None else "no seed passed the judge")

    # stage 2 -------------------------------------------------------------------------------------------------------

    def hardware_stage(self, stage: Stage) -> None:
        """Rounds of profile -> plan -> rewrite -> judge (-> debug), keeping only improvements."""
        if self.progress.best_source is None:
            self._decide(stage.name, "skipped: no correct kernel to tune")
            return
        before = self.progress.best_id
        for round_index in range(self.budget.rounds):
            if self._near_roofline():
                self.on_event(f"stage {stage.name}: within {self.budget.roofline_stop:.0%} of the physical floor, stopping", "info")
                break
            plan = self.plan(stage)
            if plan is None:
                continue
            best_source, best_id = self.progress.best_source, self.progress.best_id
            ask = lambda fb: self.backend.rewrite(best_source, stage.name, stage.objective, plan, self.progress.decisions, self._time_text(), fb)
            proposed = self.propose(stage.name, "rewrite", ask, parent_id=best_id, parent_source=best_source, label=f"rewrite, round {round_index + 1}",
                                    answers=(self.plan_edit,) if self.plan_edit else (), plan=plan)
            if proposed is None:
                continue
            cid, result, source = self.consider(proposed, stage.name, "rewrite", best_id, note=proposed.note or _top_fix(plan))
            if result.ok and proposed.tunables:
                self.tune(source, list(proposed.tunables), stage.name, cid)
        kept = self.progress.best_id != before
        self._decide(stage.name, "kept a faster kernel" if kept else "no improvement kept")

    def plan(self, stage: Stage) -> Diagnosis | None:
        """The Profile role's Diagnosis of the best kernel, through its plan gate (None: the round is skipped)."""
        self._check_budget(next_check=True, profiling=True)  # a round whose profile and check would not fit is not begun
        measurements = self.measure()
        feedback: list[str] = []
        answering: list[tuple[str, str, str]] = []  # (gate key, what, text) of the rejections the next plan answers
        self.plan_edit = None
        for _ in range(MAX_REJECTIONS + 1):
            self._check_budget()
            first_call = len(self.ledger.records)
            reply = self.backend.diagnose(self.progress.best_source, measurements, stage.name, stage.objective, "\n".join(feedback))
            self._store_new_calls()
            payload = PlanPayload(
                proposal=reply.model_dump(mode="json") if isinstance(reply, Diagnosis) else None,
                note=reply.reason if isinstance(reply, NoProposal) else "",
                author=self.backend.name,
                kernel_id=self.progress.best_id,
                objective=stage.objective,
                measurements=measurements.for_model(),
                report=to_jsonable(measurements.report) if measurements.report else None,
                heard=self._heard(answering, first_call),
            )
            if isinstance(reply, NoProposal):
                self.on_event(f"  no plan from {self.backend.name}: {reply.reason}", "no_proposal", stage=stage.name)
                if not feedback and getattr(self.backend, "empty_is_final", False):
                    return None  # the rules' last word, and no rejection to answer: nothing for a person to decide
            identity = {"proposal": payload.proposal, "note": payload.note, "kernel": fingerprint_text(self.progress.best_source)}
            seen = self._plans_seen.setdefault(stage.name, {})
            repeat = json.dumps(identity, sort_keys=True)
            if not feedback and repeat in seen:  # an earlier round was given this very plan for this very kernel
                followed = seen[repeat]
                self.on_event("  the same plan for the same kernel as an earlier round: " + (
                    "followed as the reviewer decided then, without a gate" if followed is not None else "skipped, as the reviewer decided then"),
                    "same_plan", stage=stage.name)
                return followed
            ruling = self.gates.ask(stage.name, payload, identity)
            if ruling.action == "approve":
                seen[repeat] = reply if isinstance(reply, Diagnosis) else None
                return seen[repeat]
            if ruling.action == "edit":
                self.on_event("  the reviewer edited the plan", "decision", action="edit")
                seen[repeat] = ruling.value
                self.plan_edit = (ruling.gate_key, "edited plan", ruling.value.model_dump_json(indent=1))
                return ruling.value
            if ruling.action == "stop":
                raise StageStopped()
            if ruling.action == "skip":
                seen[repeat] = None
                return None
            feedback.append(ruling.feedback or "the plan was rejected")
            answering = [(ruling.gate_key, "feedback", ruling.feedback)] if ruling.feedback else []
        self.on_event(f"  plan rejected {MAX_REJECTIONS + 1} times: this round is skipped", "info")
        return None

    # proposing and judging -----------------------------------------------------------------------------------------

    def propose(self, stage: str, step: str, ask: Callable[[str], KernelReply | DebugReply | NoProposal], *, parent_id: int | None,
                parent_source: str | None, label: str, answers: tuple[tuple[str, str, str], ...] = (), plan: Diagnosis | None = None) -> Proposed | None:
        """Ask the backend for a kernel and pass it through its kernel gate; rejections go back with their
        feedback. None: no kernel for this step (skipped, or nothing proposed and nothing written)."""
        feedback = [VERDICT_NOTE + line for line in self._feedback.get(stage, [])]  # guidance for the step, not its rejections
        # what this step's prompt carries from a person: the verdict feedback of the stage, an edited plan
        answering = [(self._feedback_from.get((stage, line), ""), "feedback", line) for line in self._feedback.get(stage, [])]
        answering += list(answers)
        rejected: str | None = None  # the last proposal the reviewer rejected here: what the next one answers
        for attempt in range(MAX_REJECTIONS + 1):
            self._check_budget(next_check=True)  # a kernel that could not be judged in time is not asked for
            first_call = len(self.ledger.records)
            reply = ask("\n".join(feedback))
            self._store_new_calls()
            source = None if isinstance(reply, NoProposal) else reply.kernel
            if isinstance(reply, NoProposal):
                self.on_event(f"  {label}: nothing proposed ({reply.reason})", "no_proposal", stage=stage, step=step)
                if len(feedback) == len(self._feedback.get(stage, [])) and getattr(self.backend, "empty_is_final", False):
                    return None  # the rules' last word, and no rejection to answer: nothing for a person to decide
            elif (same := self._judged.get(fingerprint_text(source))) is not None and step != "repair" and \
                    (getattr(self.backend, "empty_is_final", False) or getattr(self.backend, "asks_again_on_repeat", False)):
                why = _rationale(reply) or ""
                if getattr(self.backend, "asks_again_on_repeat", False) and attempt < MAX_REJECTIONS:
                    # a model repeated a kernel already judged: asked again, no gate for a person
                    self.on_event(f"  {label}: the same kernel as candidate {same}, already judged: asking for a different one",
                                  "same_kernel", stage=stage, step=step, candidate_id=same, rationale=why)
                    feedback.append(f"the kernel you proposed is identical to candidate {same}, which was already judged; "
                                    "propose a different kernel")
                    continue
                self.on_event(f"  {label}: the same kernel as candidate {same}, already judged: its verdict stands"
                              + (f" ({why[:300]})" if why else ""), "same_kernel", stage=stage, step=step, candidate_id=same, rationale=why)
                return Proposed(source, self.backend.name, _rationale(reply) or "", tuple(getattr(reply, "tunables", None) or ()),
                                getattr(reply, "paradigm", None), same_as=same)
            payload = KernelPayload(
                step=step,
                label=label,
                proposal=source,
                note=reply.reason if isinstance(reply, NoProposal) else "",
                author=self.backend.name,
                rationale=_rationale(reply),
                paradigm=getattr(reply, "paradigm", None),
                tunables=[t.model_dump() for t in getattr(reply, "tunables", None) or []],
                parent_id=parent_id,
                parent_source=parent_source,
                diff=unified_diff(parent_source or "", source or "", "parent" if parent_id else "reference"),
                rejected_source=rejected,
                heard=self._heard(answering, first_call),
                plan=plan.model_dump(mode="json") if plan is not None else None,
                parent_verdict=self._verdict_brief(parent_source) if parent_id is not None else None,
            )
            identity = {"step": step, "proposal": source, "note": payload.note, "parent": fingerprint_text(parent_source or "")}
            ruling = self.gates.ask(stage, payload, identity)
            if ruling.action == "approve" and source is not None:
                return Proposed(source, self.backend.name, _rationale(reply) or "", tuple(getattr(reply, "tunables", None) or ()), getattr(reply, "paradigm", None))
            if ruling.action == "edit":
                self.on_event(f"  {label}: the reviewer wrote the kernel", "decision", action="edit")
                return Proposed(ruling.value, "person", "written by the reviewer" if source is None else "edited by the reviewer")
            if ruling.action == "stop":
                raise StageStopped()
            if ruling.action in ("skip", "approve"):
                return None
            feedback.append(ruling.feedback or "the kernel was rejected")
            rejected = source if source is not None else rejected
            answering = [(ruling.gate_key, "feedback", ruling.feedback)] if ruling.feedback else []
        self.on_event(f"  {label}: rejected {MAX_REJECTIONS + 1} times, moving on", "info")
        return None

    def propose_and_consider(self, stage: str, step: str, ask, *, parent_id: int | None, parent_source: str | None, label: str) -> None:
        proposed = self.propose(stage, step, ask, parent_id=parent_id, parent_source=parent_source, label=label)
        if proposed is not None:
            self.consider(proposed, stage, step, parent_id)

    def consider(self, proposed: Proposed, stage: str, origin: str, parent: int | None, note: str | None = None) -> tuple[int, EvalResult, str]:
        """Judge a candidate, show its verdict at a gate, repair it while it fails (at most `debug_rounds` times),
        and keep it if it is the best so far and the reviewer accepts it. Returns the last candidate's id, verdict
        and source."""
        source = proposed.source
        if proposed.same_as is not None and proposed.same_as not in self._verdicts_rejected:  # judged, its verdict accepted
            stored = self.store.verdict(self.problem.fingerprint, fingerprint_text(source), self.options_key)
            if stored is not None:
                return proposed.same_as, from_jsonable(EvalResult, stored), source
        cid, result = self.judge_source(source, stage, origin, parent, proposed.note if note is None else note, proposed.author)
        repairs = 0
        while True:
            ruling = self.verdict_gate(stage, cid, result)
            if result.ok or ruling.action != "approve" or repairs >= self.budget.debug_rounds:
                break
            repairs += 1
            failed_id, failed_source, failed = cid, source, result
            repaired = self.propose(stage, "repair", lambda fb: self.backend.repair(failed_source, failed, self.problem_source, fb),
                                    parent_id=failed_id, parent_source=failed_source, label=f"repair of candidate {failed_id}")
            if repaired is None:
                break
            source = repaired.source
            cid, result = self.judge_source(source, stage, "debug", failed_id, repaired.note, repaired.author)
        if result.ok and ruling.action == "approve":
            self._maybe_keep(cid, source, result)
        return cid, result, source

    def verdict_gate(self, stage: str, cid: int, result: EvalResult) -> Ruling:
        """Accept the verdict (a passing kernel competes for the stage's best; a failing one goes to repair), or
        not; a rejection's feedback goes to the stage's next proposals."""
        payload = VerdictPayload(candidate_id=cid, verdict=to_jsonable(result), best_id=self.progress.best_id, best_ms=self.progress.best_ms,
                                 would_keep=result.ok and self._better(result))
        # the same gate in a replay or a branch: the kernel and how its check ended, never the reason's numbers (an
        # error's size, a size of another shape: each check draws its own inputs)
        identity = {"candidate": result.candidate.fingerprint, "status": result.status.value, "check": result.reason.split(":", 1)[0]}
        ruling = self.gates.ask(stage, payload, identity)
        if ruling.action == "reject":
            self._verdicts_rejected.add(cid)
        if ruling.action == "reject" and ruling.feedback:
            self._feedback.setdefault(stage, []).append(ruling.feedback)
            self._feedback_from[(stage, ruling.feedback)] = ruling.gate_key
        if ruling.action == "stop":
            raise StageStopped()
        return ruling

    def tune(self, source: str, tunables: list, stage: str, parent: int) -> None:
        """Hand the numbers the Code role named to the tuning engine; every configuration is judged in full."""
        from pipeline.stages.tunables import JudgeEvaluator, tunable_space, tuned_kernel
        from pipeline.tuning.strategy import Budget as SearchBudget
        from pipeline.tuning.strategy import make_strategy

        space = tunable_space(tunables)
        kernel = tuned_kernel(source, [p.name for p in space.params]) if space else None
        if self.budget.tune_evals < 1:
            return
        if space is None or kernel is None:
            self.on_event("  tuning skipped: no tunable with several values belongs to one @triton.jit kernel", "info")
            return
        if not self.timed:
            self.on_event("  tuning skipped: nothing is timed on this device", "info")
            return
        evaluator = JudgeEvaluator(source, kernel, lambda variant, note: self.judge_source(variant, stage, "tune", parent, note, "tuning"))
        try:
            search = make_strategy("pattern").run(space, evaluator, SearchBudget(max_evals=self.budget.tune_evals))
        finally:  # the configurations judged before a budget ran out count too
            for config, variant, cid, result in evaluator.judged:
                if result.ok:
                    self._maybe_keep(cid, variant, result)
        best = search.best
        self.on_event(f"  tuned {kernel} over {', '.join(p.name for p in space.params)}: {search.evaluations} judged, best {dict(best.config) if best else None}", "tuned")

    def judge_source(self, source: str, stage: str, origin: str, parent: int | None, note: str, author: str = "agent") -> tuple[int, EvalResult]:
        """Write the candidate to a real file (Triton reads source files), judge it, or reuse its stored verdict."""
        self.gates.checkpoint()
        source_fp = fingerprint_text(source)
        key = f"{stage}/{origin}/{parent}/{source_fp}"
        cid = self.store.add_candidate(self.session_id, stage, origin, source, source_fp, parent, note, author, key)
        self._judged.setdefault(source_fp, cid)
        path = self.work_dir / "candidates" / f"c{cid:04d}_{stage}_{origin}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        stored = self.store.verdict(self.problem.fingerprint, source_fp, self.options_key)
        if stored is not None:
            result = from_jsonable(EvalResult, stored)
        else:
            self._check_wall(next_check=True)
            self.on_event(f"  judging candidate {cid} ({origin})", "judging", candidate_id=cid)
            t0 = self.clock()
            result = self._evaluate(load_candidate(path))
            self.last_check_s = self.clock() - t0
            self.next_check_s = _without_reference(self.last_check_s, result)
            if self.first_check_s is None:
                self.first_check_s = self.last_check_s
            self.store.save_verdict(self.problem.fingerprint, source_fp, self.options_key, result.status.value, to_jsonable(result))
        median = result.timing.median_ms if result.timing else None
        self.progress.attempts.append(Attempt(cid, stage, origin, result.status.value, result.reason, median, False, note))
        self._baselines_once(result)
        speed = ", ".join(f"{v:.2f}x {k}" for k, v in result.speedups.items()) if result.ok and result.speedups else ""
        self.on_event(f"  candidate {cid} ({origin}): {result.status.value}" + (f", {median:.4f} ms" if median else "")
                      + (f" ({speed})" if speed else "") + f" - {result.reason}",
                      "verdict", candidate_id=cid, status=result.status.value, median_ms=median, speedups=dict(result.speedups or {}))
        return cid, result

    def _evaluate(self, candidate) -> EvalResult:
        """The judge's verdict, inputs of other shapes included (pipeline.judge.shapes: part of the check's own draw,
        so every pass is judged there): a kernel wrong on another batch never becomes the best, and its failure
        reaches the Debug agent like any other."""
        return self.judge.evaluate(self.problem, candidate)

    def _baselines_once(self, result: EvalResult) -> None:
        """The reference's own times, said once, as soon as a verdict carries them."""
        if self._baselines_said or not result.baselines:
            return
        self._baselines_said = True
        times = ", ".join(f"{'torch.compile' if k == 'compile' else k} {t.median_ms:.4f} ms" for k, t in result.baselines.items() if t is not None)
        self.on_event(f"  the reference: {times}", "baselines", **{f"{k}_ms": t.median_ms for k, t in result.baselines.items() if t is not None})

    def _better(self, result: EvalResult) -> bool:
        p = self.progress
        median = result.timing.median_ms if result.timing else None
        if p.best_id is None:
            return True
        if self.timed and median is not None and p.best_ms is not None:
            return median < p.best_ms * (1 - MIN_GAIN)
        return False  # without timing nothing can be shown to be better than what is kept

    def _maybe_keep(self, cid: int, source: str, result: EvalResult) -> None:
        if not self._better(result):
            return
        p = self.progress
        p.best_id, p.best_source, p.best_ms = cid, source, result.timing.median_ms if result.timing else None
        p.best_result = result
        index = next(i for i in range(len(p.attempts) - 1, -1, -1) if p.attempts[i].candidate_id == cid)
        p.attempts[index] = dataclasses.replace(p.attempts[index], accepted=True)
        self.on_event(f"  candidate {cid} is the best so far", "best", candidate_id=cid, median_ms=p.best_ms)

    # stage ends ----------------------------------------------------------------------------------------------------

    def end_stage(self, stage: Stage) -> None:
        """The stage_end gate: the decisions that travel on (editable, and so is the kernel the next stage starts
        from), then the checkpoint."""
        p = self.progress
        passing = [a for a in p.attempts if a.status == "ok" and a.candidate_id not in self._verdicts_rejected]
        payload = StageEndPayload(
            last_stage=stage is HARDWARE_STAGES[-1],
            proposal=StageEnd(decisions=[{"stage": d.stage, "summary": d.summary} for d in p.decisions], best_id=p.best_id),
            best_ms=p.best_ms,
            choices=[Choice(id=a.candidate_id, stage=a.stage, origin=a.origin, median_ms=a.median_ms) for a in passing],
        )
        identity = {"decisions": payload.proposal.model_dump(mode="json")["decisions"], "best": fingerprint_text(p.best_source or "")}
        ruling = self.gates.ask(stage.name, payload, identity)
        if ruling.action == "edit":
            self._apply_stage_end(ruling.value)
        if ruling.action == "stop":
            p.stopped = "stopped by the reviewer"
        self._checkpoint(stage)
        if ruling.action == "stop":
            raise SessionStopped()

    def _apply_stage_end(self, end) -> None:
        """A reviewer's edit of what travels: the summaries (matched by stage) and the kernel to go on from."""
        p = self.progress
        summaries = {d.stage: d.summary for d in end.decisions}
        p.decisions = [dataclasses.replace(d, summary=summaries.get(d.stage, d.summary)) for d in p.decisions]
        chosen = self.store.candidate_source(end.best_id) if end.best_id is not None else None
        if chosen is None or chosen == p.best_source:
            return
        stored = self.store.verdict(self.problem.fingerprint, fingerprint_text(chosen), self.options_key)
        result = from_jsonable(EvalResult, stored) if stored else None
        if result is None or not result.ok:
            self.on_event(f"  candidate {end.best_id} has no passing verdict here: the best stays candidate {p.best_id}", "info")
            return
        # By source, not by row id: a branch replaying this decision has its own rows for the same candidate.
        own = next((a.candidate_id for a in reversed(p.attempts) if self.store.candidate_source(a.candidate_id) == chosen), end.best_id)
        if own in self._verdicts_rejected:
            self.on_event(f"  candidate {own}'s verdict was rejected: the best stays candidate {p.best_id}", "info")
            return
        # The record follows the choice: the stage's decision names the chosen kernel, and it, not the one it
        # replaces, is the kept one.
        previous = p.best_id
        p.best_id, p.best_source, p.best_ms, p.best_result = own, chosen, result.timing.median_ms if result.timing else None, result
        p.attempts = [dataclasses.replace(a, accepted=True) if a.candidate_id == own else
                      dataclasses.replace(a, accepted=False) if a.candidate_id == previous else a for a in p.attempts]
        if p.decisions:
            p.decisions[-1] = dataclasses.replace(p.decisions[-1], candidate_id=own, median_ms=p.best_ms)
        self.on_event(f"  the reviewer chose candidate {own} to go on from", "decision", action="edit")

    # measurements --------------------------------------------------------------------------------------------------

    def measure(self) -> Measurements:
        """What the Profile role is shown of the best kernel: the judge's verdict and the profiler's report, which
        is kept in the store so a replayed session shows the same plan gate."""
        result = self.progress.best_result
        if self.profiler is None or result is None:
            return Measurements(result, None, "" if self.profiler else "no profiler in this run")
        source_fp = fingerprint_text(self.progress.best_source)
        environment_fp = environment_key(result.environment)
        kept = self.store.profile(self.problem.fingerprint, source_fp, environment_fp)
        if kept is not None:
            return Measurements(result, from_jsonable(ProfileReport, kept))
        path = self.work_dir / "candidates" / f"profile_c{self.progress.best_id:04d}.py"
        path.write_text(self.progress.best_source, encoding="utf-8")
        self.on_event(f"  profiling candidate {self.progress.best_id}", "profiling", candidate_id=self.progress.best_id)
        started = self.clock()
        try:
            report = self.profiler(str(path), self.problem.path)
        except Exception as error:  # a profile that fails leaves the judge's numbers; the run goes on
            self.last_profile_s = self.clock() - started
            self.on_event(f"  profiling failed ({type(error).__name__}: {error}); the Profile role sees the judge's numbers only", "info")
            return Measurements(result, None, f"{type(error).__name__}: {error}")
        self.last_profile_s = self.clock() - started
        self.store.save_profile(self.problem.fingerprint, source_fp, environment_fp, to_jsonable(report))
        return Measurements(result, report)

    # helpers -------------------------------------------------------------------------------------------------------

    def _verdict_brief(self, source: str | None) -> dict[str, Any] | None:
        """A judged kernel's verdict in brief, for the gates that show a kernel beside its parent."""
        stored = self.store.verdict(self.problem.fingerprint, fingerprint_text(source), self.options_key) if source else None
        if stored is None:
            return None
        return {"status": stored.get("status"), "reason": stored.get("reason", ""), "median_ms": (stored.get("timing") or {}).get("median_ms"),
                "speedups": stored.get("speedups") or {}}

    def _heard(self, answering: list[tuple[str, str, str]], first_call: int) -> list[Heard]:
        """What a person said that the proposal just made answers, with the model calls (since `first_call`) whose
        prompts carried it: only calls whose request holds the text verbatim are named."""
        calls = self.ledger.records[first_call:]
        heard = []
        for key, what, text in answering:
            if not text:
                continue
            carried = [c for c in calls if self._prompt_holds(c.request_key, text)]
            heard.append(Heard(gate_key=key, what=what, text=text, calls=[c.request_key for c in carried], agents=[c.agent or "" for c in carried]))
        return heard

    def _prompt_holds(self, request_key: str, text: str) -> bool:
        request = self.store.request(self.session_id, request_key)
        if request is None:
            return False
        return any(text in (m.get("content") or "") for m in request.get("messages", []))

    def _store_new_calls(self) -> None:
        records = self.ledger.records
        for record in records[self._calls_seen:]:
            self.store.add_call(self.session_id, record.model_dump(mode="json"))
        self._calls_seen = len(records)

    def _check_budget(self, next_check: bool = False, profiling: bool = False) -> None:
        self.gates.checkpoint()
        b = self.budget
        calls = self.ledger.records  # the session's own ledger
        if len(calls) >= b.max_llm_calls:
            raise BudgetExhausted(f"{len(calls)} model calls (limit {b.max_llm_calls})")
        cost = sum(r.cost_usd or 0.0 for r in calls)
        if b.max_cost_usd is not None and cost >= b.max_cost_usd:
            raise BudgetExhausted(f"${cost:.4f} spent (limit ${b.max_cost_usd})")
        self._check_wall(next_check, (self.last_profile_s or self.next_check_s or 0.0) if profiling else 0.0)

    # The budget in wall seconds bounds the whole run: a judged check is not started when, with the next check's
    # expected time and the time kept for the winner's re-verification (the first check's: a reference computed
    # afresh and a candidate, as the held-out seed needs), it would end past the budget. The next check finds the
    # reference its predecessor computed in the judge's cache: a repair of the first seed costs a candidate's
    # check, not a second reference, so it fits where the first check's whole time would not.
    def reverify_estimate_s(self) -> float:
        return REVERIFY_MARGIN * self.first_check_s if self.first_check_s is not None else 0.0

    def _check_wall(self, next_check: bool = False, before_s: float = 0.0) -> None:
        b = self.budget
        if b.max_wall_s is None:
            return
        spent, kept = self.clock() - self.started, self.reverify_estimate_s()
        upcoming = ((self.next_check_s or 0.0) if next_check else 0.0) + before_s
        if spent + kept + upcoming >= b.max_wall_s:
            held = f" ({kept:.0f} s of it kept for the winner's re-verification)" if kept >= 1 else ""
            raise BudgetExhausted(f"{b.max_wall_s:g} s of wall time{held}")

    def _near_roofline(self) -> bool:
        result = self.progress.best_result
        if not self.timed or result is None or not result.physical_floor_ms or not self.progress.best_ms:
            return False
        return result.physical_floor_ms / self.progress.best_ms >= self.budget.roofline_stop

    def _time_text(self) -> str:
        return f"{self.progress.best_ms:.4f} ms" if self.progress.best_ms else "not timed on this device"

    def _decide(self, stage: str, summary: str) -> None:
        p = self.progress
        p.decisions.append(Decision(stage, summary, p.best_id, p.best_ms))


def environment_key(environment: dict[str, Any]) -> str:
    """The key a profile is kept under beside its kernel's source: the environment of the verdict it was taken for."""
    return hashlib.sha256(json.dumps(environment, sort_keys=True).encode()).hexdigest()[:16]


def _without_reference(check_s: float, result: EvalResult) -> float:
    """A check's time less the reference's facts it computed (its structure, baselines, footprint), which the judge
    keeps for the next check; the reference's outputs for each check's new inputs stay in the estimate."""
    if result.reference_source != "computed":
        return check_s
    reference_s = (result.judge_phase_s or {}).get("reference_facts", 0.0)
    return max(check_s - reference_s, 0.0)


def unified_diff(before: str, after: str, before_name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), before_name, "proposal")
    return "".join(lines)


def _rationale(reply: Any) -> str | None:
    if isinstance(reply, KernelReply):
        return reply.rationale
    if isinstance(reply, DebugReply):
        return reply.cause
    return None


def _top_fix(diagnosis: Diagnosis) -> str:
    top = diagnosis.bottlenecks[0]
    return f"{top.name}: {top.fixes[0].change}"
