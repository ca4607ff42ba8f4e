"""One problem through the method: seeds (stage 1), then parallel mapping, tiling and memory (stage 2).

Composes the agents, the judge and the store; it does no printing itself (progress goes to a callback) and never
ends worse than the reference: only candidates the judge passed are kept, and on the GPU only faster ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pipeline.agents.code_agent import CodeAgent
from pipeline.agents.debug_agent import DebugAgent
from pipeline.agents.profile_agent import ProfileAgent
from pipeline.agents.replies import Diagnosis
from pipeline.expert.knowledge import for_stage
from pipeline.llm.client import LLMClient
from pipeline.llm.errors import LLMCallError
from pipeline.llm.structured import StructuredFailure
from pipeline.problems.loader import fingerprint_text, load_candidate
from pipeline.stages.method import ALGORITHM, HARDWARE_STAGES, PARADIGMS, Attempt, Budget, Decision, Progress, Stage
from pipeline.store import Store
from pipeline.types import Candidate, EvalOptions, EvalResult, Problem, Status, from_jsonable, to_jsonable

# A rewrite must beat the best by this much to be kept: smaller differences are noise.
MIN_GAIN = 0.01


class Evaluator(Protocol):
    """What the pipeline needs of the judge (pipeline.judge.Judge; tests may script it)."""

    options: EvalOptions

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult: ...


# Profiles a candidate file against the problem file: plain JSON data for the Profile Agent
# (pipeline.profiler's compact ProfileReport in `egg optimize`).
Profiler = Callable[[str, str], dict]


class BudgetExhausted(Exception):
    """Raised before a call that the budget no longer allows; ends the run with the best found so far."""


class Optimizer:
    """Runs the stages for one problem and keeps everything in the store."""

    def __init__(
        self,
        problem: Problem,
        judge: Evaluator,
        client: LLMClient,
        store: Store,
        run_id: str,
        work_dir: Path,
        budget: Budget = Budget(),
        on_event: Callable[[str], None] = lambda message: None,
        profiler: Profiler | None = None,
    ) -> None:
        self.problem, self.judge, self.store, self.run_id = problem, judge, store, run_id
        self.client = client.labelled(run=run_id, problem=problem.name)
        self.work_dir = work_dir
        self.budget, self.on_event, self.profiler = budget, on_event, profiler
        self.problem_source = Path(problem.path).read_text(encoding="utf-8")
        self.progress = Progress()
        self.started = time.monotonic()
        self._calls_seen = 0
        self._last_source, self._last_id = "", 0
        self.options_key = hashlib.sha256(json.dumps(to_jsonable(judge.options), sort_keys=True).encode()).hexdigest()[:16]
        self.timed = judge.options.device != "cpu" and judge.options.timing

    # the run -------------------------------------------------------------------------------------------------------

    def run(self) -> Progress:
        """Every stage in order, resuming finished ones from the store; stops early when the budget runs out."""
        try:
            for stage in (ALGORITHM, *HARDWARE_STAGES):
                if self._resume_stage(stage):
                    continue
                self.on_event(f"stage {stage.name}: {stage.objective}")
                self.seed_stage() if stage is ALGORITHM else self.hardware_stage(stage)
                self._checkpoint(stage)
        except BudgetExhausted as why:
            self.progress.stopped = str(why)
            self.on_event(f"budget exhausted: {why}; keeping the best found so far")
        return self.progress

    def _resume_stage(self, stage: Stage) -> bool:
        saved = self.store.stage(self.run_id, stage.name)
        if saved is None or saved[0] != "done":
            return False
        state = saved[1]
        self.progress.best_id, self.progress.best_source, self.progress.best_ms = state["best_id"], state["best_source"], state["best_ms"]
        if state.get("best_result"):
            self.progress.best_result = from_jsonable(EvalResult, state["best_result"])
        self.progress.decisions = [Decision(**d) for d in state["decisions"]]
        self.progress.attempts = [Attempt(**a) for a in state["attempts"]]
        self.on_event(f"stage {stage.name}: done in an earlier run, resumed from the store")
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
        }
        self.store.save_stage(self.run_id, stage.name, "done", state)

    # stage 1 -------------------------------------------------------------------------------------------------------

    def seed_stage(self) -> None:
        """k seeds of different paradigms, each judged (and repaired if it fails), then expert transformations
        applied to each correct seed; the best of all is kept."""
        code = CodeAgent(self.client.labelled(stage=ALGORITHM.name), for_stage(ALGORITHM.name))
        count = min(self.budget.seeds, len(PARADIGMS))
        correct: list[tuple[str, str, int]] = []  # (source, paradigm, candidate id)
        for index, paradigm in enumerate(PARADIGMS[:count], start=1):
            self._check_budget()
            reply = self._ask(lambda: code.seed(self.problem_source, paradigm, index, count))
            if reply is None:
                self._note(ALGORITHM.name, "seed", f"seed {index}: no usable reply")
                continue
            if self.consider(reply.value.kernel, ALGORITHM.name, "seed", None, note=reply.value.paradigm or "").ok:
                correct.append((self._last_source, reply.value.paradigm or paradigm, self._last_id))
        for source, paradigm, cid in correct if self.budget.transforms else []:
            self._check_budget()
            reply = self._ask(lambda: code.transform(self.problem_source, source, paradigm))
            if reply is None:
                self._note(ALGORITHM.name, "transform", f"candidate {cid}: no usable transformation")
                continue
            self.consider(reply.value.kernel, ALGORITHM.name, "transform", cid, note=reply.value.rationale or "")
        self._decide(ALGORITHM.name, "best seed" if self.progress.best_id is not None else "no seed passed the judge")

    # stage 2 -------------------------------------------------------------------------------------------------------

    def hardware_stage(self, stage: Stage) -> None:
        """Rounds of profile -> diagnose -> rewrite -> judge (-> debug), keeping only improvements."""
        if self.progress.best_source is None:
            self._decide(stage.name, "skipped: no correct kernel to tune")
            return
        profile_agent = ProfileAgent(self.client.labelled(stage=stage.name), for_stage(stage.name))
        code = CodeAgent(self.client.labelled(stage=stage.name), for_stage(stage.name))
        before = self.progress.best_id
        for _ in range(self.budget.rounds):
            if self._near_roofline():
                self.on_event(f"stage {stage.name}: within {self.budget.roofline_stop:.0%} of the physical floor, stopping")
                break
            self._check_budget()
            diagnosis = self._ask(lambda: profile_agent.diagnose(self.progress.best_source, self._profile(), stage.name, stage.objective))
            if diagnosis is None:
                self._note(stage.name, "profile", "the Profile Agent gave no usable diagnosis")
                continue
            self._check_budget()
            reply = self._ask(lambda: code.rewrite(self.progress.best_source, stage.name, stage.objective, diagnosis.value, self.progress.decisions, self._time_text()))
            if reply is None:
                self._note(stage.name, "rewrite", "the Code Agent gave no usable kernel")
                continue
            result = self.consider(reply.value.kernel, stage.name, "rewrite", self.progress.best_id, note=_top_fix(diagnosis.value))
            if result.ok and reply.value.tunables:
                self.tune(self._last_source, reply.value.tunables, stage.name)
        kept = self.progress.best_id != before
        self._decide(stage.name, "kept a faster kernel" if kept else "no improvement kept")

    # judging -------------------------------------------------------------------------------------------------------

    def consider(self, source: str, stage: str, origin: str, parent: int | None, note: str = "") -> EvalResult:
        """Judge a candidate, repair it while it fails (bounded), and keep it if it is the best so far."""
        cid, result = self.judge_source(source, stage, origin, parent, note)
        for _ in range(self.budget.debug_rounds):
            if result.ok:
                break
            self._check_budget()
            debug = DebugAgent(self.client.labelled(stage=stage), for_stage("debug"))
            reply = self._ask(lambda: debug.repair(source, result, self.problem_source))
            if reply is None:
                break
            source = reply.value.kernel
            cid, result = self.judge_source(source, stage, "debug", cid, reply.value.cause or "")
        if result.ok:
            self._maybe_keep(cid, source, result, stage)
        self._last_source, self._last_id = source, cid
        return result

    def tune(self, source: str, tunables: list, stage: str) -> None:
        """Hand the numbers the Code Agent named to the tuning engine; every configuration is judged in full."""
        from pipeline.stages.tunables import JudgeEvaluator, tunable_space, tuned_kernel
        from pipeline.tuning.strategy import Budget as SearchBudget
        from pipeline.tuning.strategy import make_strategy

        space = tunable_space(tunables)
        kernel = tuned_kernel(source, [p.name for p in space.params]) if space else None
        if self.budget.tune_evals < 1:
            return
        if space is None or kernel is None:
            self.on_event("  tuning skipped: no tunable with several values belongs to one @triton.jit kernel")
            return
        if not self.timed:
            self.on_event("  tuning skipped: nothing is timed on this device")
            return
        parent = self.progress.attempts[-1].candidate_id
        evaluator = JudgeEvaluator(source, kernel, lambda variant, note: self.judge_source(variant, stage, "tune", parent, note))
        search = make_strategy("pattern").run(space, evaluator, SearchBudget(max_evals=self.budget.tune_evals))
        for config, variant, cid, result in evaluator.judged:
            if result.ok:
                self._maybe_keep(cid, variant, result, stage)
        best = search.best
        self.on_event(f"  tuned {kernel} over {', '.join(p.name for p in space.params)}: {search.evaluations} judged, best {dict(best.config) if best else None}")

    def judge_source(self, source: str, stage: str, origin: str, parent: int | None, note: str) -> tuple[int, EvalResult]:
        """Write the candidate to a real file (Triton reads source files), judge it, or reuse its stored verdict."""
        source_fp = fingerprint_text(source)
        cid = self.store.add_candidate(self.run_id, stage, origin, source, source_fp, parent, note)
        path = self.work_dir / "candidates" / f"c{cid:04d}_{stage}_{origin}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        stored = self.store.verdict(self.problem.fingerprint, source_fp, self.options_key)
        if stored is not None:
            result = from_jsonable(EvalResult, stored)
        else:
            result = self.judge.evaluate(self.problem, load_candidate(path))
            self.store.save_verdict(self.problem.fingerprint, source_fp, self.options_key, result.status.value, to_jsonable(result))
        median = result.timing.median_ms if result.timing else None
        self.progress.attempts.append(Attempt(cid, stage, origin, result.status.value, result.reason, median, False, note))
        self.on_event(f"  candidate {cid} ({origin}): {result.status.value}" + (f", {median:.4f} ms" if median else "") + f" - {result.reason}")
        return cid, result

    def _maybe_keep(self, cid: int, source: str, result: EvalResult, stage: str) -> None:
        p = self.progress
        median = result.timing.median_ms if result.timing else None
        if p.best_id is None:
            better = True
        elif self.timed and median is not None and p.best_ms is not None:
            better = median < p.best_ms * (1 - MIN_GAIN)
        else:
            better = False  # without timing nothing can be shown to be better than what is kept
        if better:
            p.best_id, p.best_source, p.best_ms = cid, source, median
            p.best_result = result
            index = next(i for i in range(len(p.attempts) - 1, -1, -1) if p.attempts[i].candidate_id == cid)
            p.attempts[index] = dataclasses.replace(p.attempts[index], accepted=True)

    # helpers -------------------------------------------------------------------------------------------------------

    def _ask(self, call: Callable[[], Any]):
        """An agent's typed reply, or None when the model failed (malformed replies, transport failures)."""
        try:
            reply = call()
        except LLMCallError as error:
            self.on_event(f"  model call failed: {error}")
            reply = None
        finally:
            self._store_new_calls()
        if isinstance(reply, StructuredFailure):
            self.on_event(f"  malformed reply after {len(reply.errors)} tries: {reply.errors[-1][:160]}")
            return None
        return reply

    def _store_new_calls(self) -> None:
        records = self.client.ledger.records
        for record in records[self._calls_seen:]:
            self.store.add_call(self.run_id, record.model_dump(mode="json"))
        self._calls_seen = len(records)

    def _check_budget(self) -> None:
        b, ledger = self.budget, self.client.ledger
        calls = [r for r in ledger.records if r.run == self.run_id and r.problem == self.problem.name]
        if len(calls) >= b.max_llm_calls:
            raise BudgetExhausted(f"{len(calls)} model calls (limit {b.max_llm_calls})")
        cost = sum(r.cost_usd or 0.0 for r in calls)
        if b.max_cost_usd is not None and cost >= b.max_cost_usd:
            raise BudgetExhausted(f"${cost:.4f} spent (limit ${b.max_cost_usd})")
        if b.max_wall_s is not None and time.monotonic() - self.started >= b.max_wall_s:
            raise BudgetExhausted(f"{b.max_wall_s:g} s of wall time")

    def _near_roofline(self) -> bool:
        result = self.progress.best_result
        if not self.timed or result is None or not result.physical_floor_ms or not self.progress.best_ms:
            return False
        return result.physical_floor_ms / self.progress.best_ms >= self.budget.roofline_stop

    def _profile(self) -> dict[str, Any]:
        """What the Profile Agent is shown: the judge's numbers for the best kernel, and the profiler's report
        (NCU counters, kernel times or static sm_90 facts, whichever the machine allows)."""
        result = self.progress.best_result
        if result is None:
            return {"note": "no measurements"}
        data: dict[str, Any] = {"device": result.device, "kernels_launched": result.kernels_launched}
        if result.timing:
            data["time_ms"] = {"median": result.timing.median_ms, "ci95": [result.timing.ci95_low_ms, result.timing.ci95_high_ms]}
            data["speedups"] = result.speedups
            data["physical_floor_ms"] = result.physical_floor_ms
        else:
            data["note"] = "correctness only on this device: no timings"
        if self.profiler is not None:
            path = self.work_dir / "candidates" / f"profile_c{self.progress.best_id:04d}.py"
            path.write_text(self.progress.best_source, encoding="utf-8")
            try:
                data["profile"] = self.profiler(str(path), self.problem.path)
            except Exception as error:  # a profile that fails leaves the judge's numbers; the run goes on
                data["profile_error"] = f"{type(error).__name__}: {error}"
                self.on_event(f"  profiling failed ({type(error).__name__}: {error}); the Profile Agent sees the judge's numbers only")
        return data

    def _time_text(self) -> str:
        return f"{self.progress.best_ms:.4f} ms" if self.progress.best_ms else "not timed on this device"

    def _decide(self, stage: str, summary: str) -> None:
        p = self.progress
        self.progress.decisions.append(Decision(stage, summary, p.best_id, p.best_ms))

    def _note(self, stage: str, origin: str, message: str) -> None:
        self.on_event(f"  {message}")


def _top_fix(diagnosis: Diagnosis) -> str:
    top = diagnosis.bottlenecks[0]
    return f"{top.name}: {top.fixes[0].change}"
