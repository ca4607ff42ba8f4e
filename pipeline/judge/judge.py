"""`evaluate(problem, candidate, options) -> EvalResult`: the strict verdict on one candidate.

The reference runs in one fresh worker, the candidate in another; the candidate never sees the reference outputs,
and every comparison and verdict is made here, in a process no candidate code has run in.

What does not change between candidates is done once: a problem's reference (its outputs for the seeds the checks
use, its eager and torch.compile baselines, its physical floor) is kept in memory for the Judge's life and on disk
(pipeline.judge.refcache) for any later process. The candidate's worker starts while the reference is being
prepared, and waits for its plan; on a GPU, outputs stay on the device from the workers' calls to the comparisons.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from pipeline.judge import compare
from pipeline.judge.audit import audit_source
from pipeline.judge.refcache import ReferenceCache, cache_key, environment_fingerprint
from pipeline.judge.sandbox import InfraError, Job, JobOutcome, WorkerPool, default_cache_root
from pipeline.judge.tensorfile import load_outputs
from pipeline.types import Candidate, Check, EvalOptions, EvalResult, Finding, Flag, Problem, Status, Timing, TrialResult

# Reads a candidate's source and returns the cheat patterns in it (pipeline.judge.audit.audit_source).
Auditor = Callable[..., tuple[Finding, ...]]
REFERENCE_TIMEOUT_S = 1800.0
DEFAULT_CACHE = "default"  # Judge(cache_dir=...): the reference cache under $EGG_CACHE (None: no disk cache)

# Timing is flagged as gamed when the host-side time to a full-device sync exceeds the event time by this much.
# The slack covers the host's own overhead and the tail of the queued L2 flush (256 MB at ~4 TB/s is ~0.07 ms).
SIDE_STREAM_RATIO, SIDE_STREAM_SLACK_MS = 1.25, 0.25
# A candidate faster than this fraction of the physical floor is flagged (noise and cache effects stay below it).
PHYSICAL_LIMIT_MARGIN = 0.9
# Datasheet dense tensor peaks (FLOP/s) by device name; the floor uses the fastest precision that could pass.
PEAK_FLOPS = {"H200": {"float32": 495e12, "half": 989e12}, "H100": {"float32": 495e12, "half": 989e12}}


@dataclass
class Reference:
    """What the reference worker produced for one problem: outputs, structure, costs and baseline timings.
    `source` says where it came from this time: memory, disk, disk+outputs_recomputed, or computed."""

    result: dict[str, Any]
    outputs: dict[str, list[torch.Tensor]]
    input_sets: list[dict[str, Any]]
    timed_sets: list[dict[str, Any]]
    degeneracy: compare.Degeneracy
    notes: list[str] = field(default_factory=list)
    source: str = "computed"
    worker_phase_s: dict[str, float] = field(default_factory=dict)  # this time's reference worker, if one ran

    @property
    def dtypes(self) -> frozenset[str]:
        return _dtypes(self.result)

    def facts(self) -> dict[str, Any]:
        """Everything but the outputs, as JSON data (what the disk cache keeps)."""
        return {"result": self.result, "input_sets": self.input_sets, "timed_sets": self.timed_sets,
                "degeneracy": {"degenerate": self.degeneracy.degenerate, "reason": self.degeneracy.reason}, "notes": self.notes}

    @classmethod
    def from_facts(cls, facts: dict[str, Any], outputs: dict[str, list[torch.Tensor]], source: str) -> Reference:
        d = facts["degeneracy"]
        return cls(facts["result"], outputs, facts["input_sets"], facts["timed_sets"], compare.Degeneracy(d["degenerate"], d["reason"]),
                   list(facts["notes"]), source)


def _dtypes(result: dict[str, Any]) -> frozenset[str]:
    return frozenset(t["dtype"] for s in result["structure"].values() for t in s["tensors"])


class ReferenceError(Exception):
    """The problem itself could not be run: never blamed on a candidate."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def _seeds(seed: int, count: int, salt: str) -> list[int]:
    rng = random.Random(f"egg:{salt}:{seed}")
    return [rng.randrange(1, 2**31 - 1) for _ in range(count)]


class PendingReference:
    """A reference on its way: ready (memory, or disk with its outputs), or a worker still running. `facts` is known
    at once unless the reference has never been run with these options here."""

    def __init__(self, judge: Judge, problem: Problem, key: str, *, ready: Reference | None = None,
                 facts: dict[str, Any] | None = None, job: Job | None = None, input_sets=None, timed_sets=None) -> None:
        self.judge, self.problem, self.key = judge, problem, key
        self.ready, self.facts, self.job = ready, facts, job
        self.input_sets, self.timed_sets = input_sets, timed_sets

    @property
    def dtypes(self) -> frozenset[str] | None:
        if self.ready is not None:
            return self.ready.dtypes
        return _dtypes(self.facts["result"]) if self.facts is not None else None

    def cancel(self) -> None:
        if self.job is not None:
            self.job.kill()
            self.job.wait().close_regions()
            self.job = None

    def finish(self) -> Reference:
        """The reference, once its worker (if any) is done. Raises ReferenceError if the problem does not run."""
        if self.ready is None:
            self.ready = self.judge._finish_reference(self)
        return self.ready


class Judge:
    """Evaluates candidates on one device, caching each problem's reference in memory and on disk. Use as a
    context manager.

    cache_dir: where references are kept between processes (default `$EGG_CACHE/references`; None keeps none; or a
    ReferenceCache).
    keep_references: how many problems' reference outputs stay in memory (GPU memory on a GPU)."""

    def __init__(self, options: EvalOptions, pool: WorkerPool | None = None, auditor: Auditor = audit_source,
                 cache_dir: str | Path | ReferenceCache | None = DEFAULT_CACHE, keep_references: int = 2) -> None:
        self.options = options
        self.pool = pool or WorkerPool(options.device)
        self.pool.start_server()  # its seconds of imports overlap the caller's own
        self.auditor = auditor
        if isinstance(cache_dir, ReferenceCache):
            self.cache = cache_dir
        else:
            self.cache = ReferenceCache(default_cache_root() / "references" if cache_dir == DEFAULT_CACHE else cache_dir)
        self.keep_references = keep_references
        self._references: OrderedDict[str, Reference] = OrderedDict()
        self._environment: dict[str, str] | None = None
        self._warned: set[str] = set()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._references.clear()
        self.pool.close()

    @property
    def compare_device(self) -> str:
        """Where outputs are compared: large outputs compare far faster on the GPU than in float64 on the CPU."""
        return "cuda" if self.options.device == "cuda" and torch.cuda.is_available() else "cpu"

    @property
    def timing_enabled(self) -> bool:
        return self.options.timing and self.options.device != "cpu"

    # reference -----------------------------------------------------------------------------------------------------

    def reference(self, problem: Problem) -> Reference:
        """The problem's reference: from memory, the disk cache, or a reference worker (once per problem)."""
        return self._prepare_reference(problem).finish()

    def _key(self, problem: Problem) -> str:
        if self._environment is None:
            self._environment = environment_fingerprint(self.compare_device if self.options.device == "cuda" else "cpu")
        return cache_key(problem.fingerprint, self.options, self._environment)

    def _prepare_reference(self, problem: Problem, *, use_disk: bool = True) -> PendingReference:
        kept = self._references.get(problem.fingerprint)
        if kept is not None:
            self._references.move_to_end(problem.fingerprint)
            return PendingReference(self, problem, "", ready=dataclasses.replace(kept, source="memory"))
        key = self._key(problem)
        entry = self.cache.load(key) if use_disk else None
        if entry is not None and entry.outputs is not None:
            outputs = {n: [t.to(self.compare_device) for t in ts] for n, ts in entry.outputs.items()}
            return PendingReference(self, problem, key, ready=self._keep(problem, Reference.from_facts(entry.facts, outputs, "disk")))
        if entry is not None:  # the facts are cached, the outputs were too large: recompute only them
            facts = entry.facts
            job = self._start_reference(problem, facts["input_sets"], facts["timed_sets"], mode="outputs")
            return PendingReference(self, problem, key, facts=facts, job=job)
        input_sets, timed_sets = self._input_sets()
        job = self._start_reference(problem, input_sets, timed_sets, mode="full")
        return PendingReference(self, problem, key, job=job, input_sets=input_sets, timed_sets=timed_sets)

    def _input_sets(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        opts = self.options
        seeds = _seeds(opts.seed, opts.correctness_trials + 1, "trials")
        sets = [{"name": f"trial_{i + 1}", "seed": s} for i, s in enumerate(seeds[:-1])]
        if opts.signed_trial:
            sets.append({"name": "signed", "seed": seeds[-1], "signed": True})
        timed_count = opts.timed_input_sets if self.timing_enabled else 0
        timed = [{"name": f"timed_{k}", "seed": s} for k, s in enumerate(_seeds(opts.seed, timed_count, "timed"))]
        return sets, timed

    def _start_reference(self, problem: Problem, input_sets, timed_sets, *, mode: str) -> Job:
        spec = {
            "kind": "reference",
            "mode": mode,
            "problem_path": problem.path,
            "options": _worker_options(self.options),
            "input_sets": input_sets,
            "timed_sets": timed_sets,
        }
        return self.pool.start(spec, self.pool.new_workdir("reference"), compile_timeout_s=REFERENCE_TIMEOUT_S,
                               run_timeout_s=REFERENCE_TIMEOUT_S, read_only=(problem.path,), cache_key=f"reference-{problem.fingerprint[:16]}")

    def _finish_reference(self, pending: PendingReference) -> Reference:
        outcome = pending.job.wait()
        pending.job = None
        try:
            if outcome.result is None or "failure" in outcome.result:
                why = outcome.result["failure"]["message"] if outcome.result else _exit_story(outcome)
                raise ReferenceError(f"the reference problem failed to run: {why}", outcome.log_tail)
            outputs = self._collect(outcome)
        finally:
            outcome.close_regions()
            shutil.rmtree(outcome.workdir, ignore_errors=True)  # candidates must not find the reference outputs on disk
        if pending.facts is not None:
            return self._recomputed(pending, outcome.result, outputs)
        reference = Reference(outcome.result, outputs, pending.input_sets, pending.timed_sets, compare.Degeneracy(False),
                              worker_phase_s=dict(outcome.result.get("phase_s", {})))
        self._drop_unusable_signed_trial(reference)
        trial_outputs = [outputs[s["name"]] for s in reference.input_sets if not s.get("signed")]
        reference.degeneracy = compare.detect_degenerate(trial_outputs, device=self.compare_device)
        self.cache.store(pending.key, reference.facts(), reference.outputs)
        return self._keep(pending.problem, reference)

    def _recomputed(self, pending: PendingReference, result: dict[str, Any], outputs) -> Reference:
        """The cached facts with freshly computed outputs, if the run saw the same inputs and gave the same structure."""
        facts = pending.facts
        cached = facts["result"]
        if result["checksums"] != cached["checksums"] or result["structure"] != cached["structure"]:
            self.cache.remove(pending.key)  # the problem's inputs are not reproducible: compute everything again
            return self._prepare_reference(pending.problem, use_disk=False).finish()
        reference = Reference.from_facts(facts, outputs, "disk+outputs_recomputed")
        reference.worker_phase_s = dict(result.get("phase_s", {}))
        return self._keep(pending.problem, reference)

    def _keep(self, problem: Problem, reference: Reference) -> Reference:
        self._references[problem.fingerprint] = reference
        self._references.move_to_end(problem.fingerprint)
        while len(self._references) > max(self.keep_references, 1):
            self._references.popitem(last=False)
        return reference

    def _collect(self, outcome: JobOutcome) -> dict[str, list[torch.Tensor]]:
        """A finished job's outputs: device regions it handed over, and files it wrote."""
        regions = {}
        if outcome.regions:
            from pipeline.judge import devicemem

            try:
                for region, (fd, size) in list(outcome.regions.items()):
                    del outcome.regions[region]
                    regions[region] = devicemem.open_region(fd, size)
            except devicemem.DeviceMemoryError as exc:
                raise InfraError(f"outputs handed over on the GPU could not be mapped here: {exc}") from exc
        outputs = load_outputs(outcome.workdir, regions)
        if self.compare_device == "cuda":
            outputs = {n: [t.to("cuda") for t in ts] for n, ts in outputs.items()}
        return outputs

    @staticmethod
    def _drop_unusable_signed_trial(reference: Reference) -> None:
        signed = [s for s in reference.input_sets if s.get("signed")]
        if signed and any(t.is_floating_point() and not bool(t.isfinite().all()) for t in reference.outputs[signed[0]["name"]]):
            reference.input_sets = [s for s in reference.input_sets if not s.get("signed")]
            reference.notes.append("signed-input trial skipped: the reference itself gives NaN/Inf on signed inputs")

    # candidate -----------------------------------------------------------------------------------------------------

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        """Judge one candidate. Never raises for anything the candidate does; infra faults become infra_error."""
        start = time.monotonic()
        base = EvalResult(Status.INFRA_ERROR, "", problem, candidate, self.options.device)
        try:
            verdict = Evaluation(self, problem, candidate).run()
        except ReferenceError as exc:
            verdict = dataclasses.replace(base, reason=str(exc), log_tail=exc.log_tail)
        except InfraError as exc:
            verdict = dataclasses.replace(base, reason=f"sandbox failure: {exc}")
        phases = dict(verdict.judge_phase_s, total=round(time.monotonic() - start, 3))
        return dataclasses.replace(verdict, duration_s=round(time.monotonic() - start, 3), judge_phase_s=phases)

    def warn(self, message: str) -> None:
        """A one-line warning on stderr, once per Judge."""
        if message not in self._warned:
            self._warned.add(message)
            print(f"egg: warning: {message}", file=sys.stderr)


def evaluate(problem: Problem, candidate: Candidate, options: EvalOptions | None = None, **judge_options) -> EvalResult:
    """Judge one candidate against one problem (a fresh worker pool for this call alone; the disk cache of
    references is used unless `cache_dir=None`)."""
    with Judge(options or EvalOptions(), **judge_options) as judge:
        return judge.evaluate(problem, candidate)


def _worker_options(options: EvalOptions) -> dict[str, Any]:
    data = dataclasses.asdict(options)
    data["baselines"] = list(options.baselines)
    return data


def _exit_story(outcome: JobOutcome) -> str:
    phase = outcome.phase or "start-up"
    if outcome.returncode is None:
        return f"no exit status (phase {phase})"
    if outcome.returncode < 0:
        sig = signal.Signals(-outcome.returncode).name
        hint = " (killed: often out of memory)" if sig == "SIGKILL" else ""
        return f"the process died from {sig}{hint} during phase {phase}"
    return f"the process exited with code {outcome.returncode} during phase {phase}"


class Evaluation:
    """One candidate through the judge: the audit, its worker started while the reference is prepared, its plan
    sent once the reference is ready, then the verdict."""

    def __init__(self, judge: Judge, problem: Problem, candidate: Candidate) -> None:
        self.judge, self.problem, self.candidate = judge, problem, candidate
        self.phases: dict[str, float] = {}
        self._clock = time.monotonic()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._clock, 4)
        self._clock = now

    def run(self) -> EvalResult:
        source = Path(self.candidate.path).read_text(encoding="utf-8")
        self.judge.pool.wait_ready()  # a fresh process waits here for the worker server's imports
        self._lap("worker_server")
        pending = self.judge._prepare_reference(self.problem)
        self._lap("reference_lookup")
        job = None
        try:
            audit = None
            if pending.dtypes is not None:  # known without running anything: audit before starting a worker
                audit = self._audit(source, pending.dtypes)
                if audit.early is not None:
                    pending.cancel()
                    return self._finish_early(audit, pending)
            job = self._start_candidate()
            self._lap("start_job")
            early_plan = None
            if pending.ready is None and pending.facts is not None:
                # The cached facts make the plan while the reference's outputs are recomputed: the candidate runs its
                # calls meanwhile, and waits for `go` before its timing, so nothing else runs on the device then.
                early_plan = self._plan(Reference.from_facts(pending.facts, {}, "disk"))
                job.send({"type": "plan", **early_plan, "await_go": True})
                self._lap("send_plan")
            reference = pending.finish()
            self._lap("reference")
            if reference.source not in ("memory", "disk"):  # where the reference worker's seconds went
                self.phases.update({f"reference_worker_{k}": v for k, v in reference.worker_phase_s.items()})
            if audit is None:
                audit = self._audit(source, reference.dtypes)
                if audit.early is not None:
                    job.kill()
                    job.wait().close_regions()
                    return dataclasses.replace(audit.early(reference), judge_phase_s=self.phases, reference_source=reference.source)
            verdict = Verdict(self.judge, self.problem, self.candidate, reference, audit.check)
            plan = self._plan(reference)
            if early_plan is None:
                job.send({"type": "plan", **plan})
            elif plan != early_plan:  # the problem's inputs were not reproducible: its reference was made anew
                job.kill()
                job.wait().close_regions()
                job = self._start_candidate()
                job.send({"type": "plan", **plan})
            else:
                job.send({"type": "go"})
            self._lap("send_plan")
            outcome = job.wait()
            job = None
            self._lap("candidate")
            result = verdict.judge_outcome(outcome, self._lap)
        except BaseException:
            pending.cancel()
            if job is not None:
                job.kill()
                job.wait().close_regions()
            raise
        self.phases.update(_worker_phases(result.phase_s))
        return dataclasses.replace(result, judge_phase_s=self.phases, reference_source=reference.source)

    def _finish_early(self, audit: Audit, pending: PendingReference) -> EvalResult:
        """A verdict from the source alone; the reference's facts (baselines, environment) are cached."""
        facts = pending.facts or pending.ready.facts()
        ref = Reference.from_facts(facts, {}, pending.ready.source if pending.ready else "disk")
        return dataclasses.replace(audit.early(ref), judge_phase_s=self.phases, reference_source=ref.source)

    def _audit(self, source: str, dtypes: frozenset[str]) -> Audit:
        try:
            findings = self.judge.auditor(source, reference_dtypes=dtypes)
        except SyntaxError as exc:
            check = Check("static_audit", None, "not parsed")
            why = f"syntax error at line {exc.lineno}: {exc.msg}"
            return Audit(check, lambda ref: Verdict(self.judge, self.problem, self.candidate, ref, check).result(Status.COMPILE_ERROR, why))
        finally:
            self._lap("audit")
        check = Check("static_audit", not findings, "; ".join(_finding_text(f) for f in findings) or "no cheat patterns in the source")
        if not findings:
            return Audit(check, None)
        why = _finding_text(findings[0]) + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")
        return Audit(check, lambda ref: Verdict(self.judge, self.problem, self.candidate, ref, check).result(Status.BANNED, why))

    def _start_candidate(self) -> Job:
        spec = {
            "kind": "candidate",
            "problem_path": self.problem.path,
            "candidate_path": self.candidate.path,
            "options": _worker_options(self.judge.options),
        }
        pool, opts = self.judge.pool, self.judge.options
        return pool.start(spec, pool.new_workdir("candidate"), compile_timeout_s=opts.compile_timeout_s, run_timeout_s=opts.run_timeout_s,
                          read_only=(self.problem.path, self.candidate.path), cache_key=f"candidate-{self.candidate.fingerprint[:16]}")

    def _plan(self, reference: Reference) -> dict[str, Any]:
        first = reference.result["structure"][reference.input_sets[0]["name"]]["tensors"]
        return {"input_sets": reference.input_sets, "timed_sets": reference.timed_sets,
                "poison": [[t["shape"], t["dtype"]] for t in first], "sample": _sample(self.judge.options, self.candidate)}


@dataclass(frozen=True)
class Audit:
    """The static audit's check, and (when it ends the evaluation) how to build that verdict from a reference."""

    check: Check
    early: Callable[[Reference], EvalResult] | None


def _worker_phases(phase_s: dict[str, float]) -> dict[str, float]:
    """The candidate worker's phases grouped as the judge reports them."""
    grouped = {"worker_isolation": phase_s.get("isolation", 0.0), "worker_cuda_init": phase_s.get("cuda_init", 0.0),
               "worker_setup": phase_s.get("setup", 0.0), "worker_waited_for_plan": phase_s.get("wait_plan", 0.0),
               "worker_import_construct": phase_s.get("import", 0.0) + phase_s.get("construct", 0.0),
               "worker_calls": phase_s.get("first_call", 0.0) + phase_s.get("correctness", 0.0) + phase_s.get("audit", 0.0),
               "worker_waited_for_go": phase_s.get("wait_go", 0.0), "worker_timing": phase_s.get("timing", 0.0)}
    return {k: round(v, 4) for k, v in grouped.items()}


def _sample(options: EvalOptions, candidate: Candidate) -> dict[str, int]:
    """How large outputs of extra calls are subsampled (an offset the candidate cannot know in advance)."""
    # Wholesale wrong outputs (caching, phase switching) still show, without GiBs of copies per candidate.
    limit = options.subsample_above
    return {"min_numel": limit, "elements": limit, "offset": _seeds(options.seed, 1, candidate.fingerprint)[0]}


class Verdict:
    """Builds one candidate's EvalResult from the static audit's check and its sandboxed run: every check in order."""

    def __init__(self, judge: Judge, problem: Problem, candidate: Candidate, reference: Reference, audit: Check) -> None:
        self.judge, self.problem, self.candidate, self.reference = judge, problem, candidate, reference
        self.options = judge.options
        self.checks: list[Check] = [audit]
        self.trials: list[TrialResult] = []
        self.flags: list[Flag] = [Flag("note", n) for n in reference.notes]
        self.environment: dict[str, str] = dict(reference.result.get("environment", {}))
        if reference.degeneracy.degenerate:
            self.flags.append(Flag("degenerate_problem", f"{reference.degeneracy.reason}; outputs are also judged by error relative to the reference's variation"))

    def result(self, status: Status, reason: str, **extra: Any) -> EvalResult:
        return EvalResult(
            status=status,
            reason=reason,
            problem=self.problem,
            candidate=self.candidate,
            device=self.options.device,
            checks=tuple(self.checks),
            trials=tuple(self.trials),
            flags=tuple(self.flags),
            environment=self.environment,
            baselines=self._baselines(),
            **extra,
        )

    def _baselines(self) -> dict[str, Timing]:
        return {name: Timing(**t) for name, t in self.reference.result.get("baselines", {}).items()}

    @property
    def sample(self) -> dict[str, int]:
        return _sample(self.options, self.candidate)

    def judge_outcome(self, outcome: JobOutcome, lap: Callable[[str], None] = lambda name: None) -> EvalResult:
        """The verdict on a finished candidate run (its GPU memory is released once the checks are done)."""
        try:
            self._record_sandbox(outcome.result)
            early = self._early_exit(outcome)
            if early is not None:
                return early
            return self._judge_run(outcome, lap)
        finally:
            outcome.close_regions()
            shutil.rmtree(outcome.workdir, ignore_errors=True)

    def _record_sandbox(self, result: dict[str, Any] | None) -> None:
        """What the candidate's process could reach, in the verdict's environment; a flag and a warning if less
        than full isolation."""
        info = (result or {}).get("isolation") or {}
        if info:
            self.environment["isolation"] = info.get("isolation", "")
            missing = info.get("missing", [])
            if missing:
                text = "; ".join(missing)
                self.environment["isolation_missing"] = text
                self.flags.append(Flag("isolation_incomplete", f"the candidate ran with less isolation than egg asks for: {text}"))
                self.judge.warn(f"candidate isolation incomplete: {text}")
        if result and "output_transport" in result:
            self.environment["output_transport"] = result["output_transport"]

    def _early_exit(self, outcome: JobOutcome) -> EvalResult | None:
        """A verdict when the run did not get to the checks: a timeout, a crash, or an error it reported."""
        tail = outcome.log_tail
        if outcome.timed_out:
            limit = self.options.compile_timeout_s if outcome.timed_out == "compile" else self.options.run_timeout_s
            return self.result(Status.TIMEOUT, f"{outcome.timed_out} phase ({outcome.phase or 'start-up'}) exceeded {limit:g} s; the process group was killed", log_tail=tail)
        if outcome.result is None:
            in_compile = outcome.phase in ("", "setup", "wait_plan", "import", "construct")
            status = Status.COMPILE_ERROR if in_compile else Status.RUNTIME_ERROR
            return self.result(status, _exit_story(outcome), log_tail=tail)
        failure = outcome.result.get("failure")
        if failure:
            self._observe_calls(outcome.result)
            return self.result(Status(failure["status"]), failure["message"], log_tail=(failure.get("detail") or "")[-4000:] or tail, kernels_launched=outcome.result.get("kernels", {}))
        return None

    def _judge_run(self, outcome: JobOutcome, lap: Callable[[str], None]) -> EvalResult:
        result = outcome.result
        try:
            outputs = self.judge._collect(outcome)
        except (OSError, ValueError, KeyError) as exc:
            return self.result(Status.RUNTIME_ERROR, f"the candidate's outputs could not be read: {type(exc).__name__}: {exc}", log_tail=outcome.log_tail)
        lap("outputs")
        checks = CandidateChecks(self, result, outputs)
        status, reason = checks.run()
        del outputs
        lap("checks")
        if self.judge.compare_device == "cuda":  # hand the comparison's device memory back before the next worker
            torch.cuda.empty_cache()
        floor_ms = checks.floor_ms
        timing = Timing(**result["timing"]) if "timing" in result else None
        speedups = {}
        if timing is not None:
            speedups = {name: round(b.median_ms / timing.median_ms, 4) for name, b in self._baselines().items()}
        if status is Status.OK and (flag := host_bound_flag(result)) is not None:
            self.flags.append(flag)
        if status is Status.OK and timing is None:
            self.flags.append(Flag("timing_skipped", "timing skipped: --device cpu runs Triton's interpreter, whose speed means nothing"))
        return self.result(
            status,
            reason,
            timing=timing if status is Status.OK else None,
            speedups=speedups if status is Status.OK else {},
            kernels_launched=result.get("kernels", {}),
            log_tail="" if status is Status.OK else outcome.log_tail,
            phase_s=result.get("phase_s", {}),
            physical_floor_ms=floor_ms,
        )

    def _observe_calls(self, result: dict[str, Any]) -> None:
        for call in result.get("calls", []):
            self.checks.append(Check(f"call_{call['name']}", True, f"{call['own_launches']} Triton launches"))


def host_bound_flag(result: dict[str, Any]) -> Flag | None:
    """The host took longer to launch one call than the device took to run it: the timed calls had a head start
    (EvalOptions.head_start_ms and _mode), so device time is what was measured, and a real caller would wait for the
    host."""
    if "timing" not in result or "timing_launch" not in result:
        return None
    device_ms, launch_ms = result["timing"]["median_ms"], result["timing_launch"]["median_ms"]
    if launch_ms <= device_ms:
        return None
    capped = result.get("timing_head_start_capped", 0)
    tail = f" ({capped} timed trials outlasted the head start, so their host time is in the device time)" if capped else ""
    return Flag("host_bound", f"launching one call takes the host {launch_ms:.4g} ms, longer than the device's {device_ms:.4g} ms: "
                              "the timing is device time; without CUDA graphs a caller waits for the host" + tail)


def _finding_text(finding: Finding) -> str:
    return f"{finding.rule} (line {finding.line}): {finding.message}"


class CandidateChecks:
    """Every check on a finished candidate run, in the order that decides its status."""

    def __init__(self, verdict: Verdict, result: dict[str, Any], outputs: dict[str, list[torch.Tensor]]) -> None:
        self.verdict, self.result, self.outputs = verdict, result, outputs
        self.reference = verdict.reference
        self.calls = {c["name"]: c for c in result.get("calls", [])}
        self.compare_device = verdict.judge.compare_device
        self.floor_ms: float | None = None

    def run(self) -> tuple[Status, str]:
        """Run all checks; the status is the first failure's (banned before mismatch), else ok."""
        ordered = [
            (Status.BANNED, self.timer_integrity),
            (Status.BANNED, self.output_types),
            (Status.BANNED, self.input_mutation),
            (Status.BANNED, self.background_threads),
            (Status.BANNED, self.triton_launched),
            (Status.BANNED, self.torch_delegation),
            (Status.INFRA_ERROR, self.same_inputs),
            (Status.MISMATCH, self.output_structure),
            (Status.MISMATCH, self.correctness),
            (Status.BANNED, self.side_stream),
            (Status.BANNED, self.physical_limit),
        ]
        first: tuple[Status, str] | None = None
        for status, check in ordered:
            outcome = check()
            self.verdict.checks.append(outcome)
            if outcome.passed is False and first is None:
                first = (status, f"{outcome.name}: {outcome.detail}")
        return first or (Status.OK, "passed every check")

    def timer_integrity(self) -> Check:
        changed = self.result.get("tampering", [])
        return Check("timer_integrity", not changed, f"replaced while the candidate ran: {', '.join(changed)}" if changed else "torch, time and triton functions untouched")

    def output_types(self) -> Check:
        bad = sorted({t for c in self.calls.values() for t in c["types"] if t != "torch.Tensor"})
        return Check("output_types", not bad, f"outputs of type {', '.join(bad)} (must be exactly torch.Tensor)" if bad else "plain tensors")

    def input_mutation(self) -> Check:
        bad = {name: c["mutated_inputs"] for name, c in self.calls.items() if c["mutated_inputs"]}
        if bad:
            name, idx = next(iter(bad.items()))
            return Check("input_mutation", False, f"call {name} wrote to input(s) {idx}")
        return Check("input_mutation", True, "inputs unchanged by every call")

    def background_threads(self) -> Check:
        leaked = [n for n, c in self.calls.items() if c["threads_after"] > 0]
        if self.result.get("threads_after_timing", 0) > 0:
            leaked.append("timing")
        detail = f"threads still running after call(s) {', '.join(leaked)}" if leaked else "no thread outlived a call"
        return Check("background_threads", not leaked, detail)

    def triton_launched(self) -> Check:
        idle = [n for n, c in self.calls.items() if c["own_launches"] < 1]
        if idle:
            seen = self.result.get("kernels", {})
            what = f"; launches seen: {seen}" if seen else "; no Triton kernel launched at all"
            return Check("triton_launched", False, f"no Triton kernel of the candidate launched in call(s) {', '.join(idle)}{what}")
        timed_calls = self.result.get("timed_calls")
        if timed_calls and self.result.get("timed_launches", 0) < timed_calls:
            return Check("triton_launched", False, f"{self.result['timed_launches']} Triton launches in {timed_calls} timed calls")
        per_call = ", ".join(f"{k}×{v}" for k, v in sorted(self.result.get("kernels", {}).items()))
        return Check("triton_launched", True, f"launched: {per_call}")

    def torch_delegation(self) -> Check:
        ref_ops = set(self.reference.result.get("ops", []))
        cand_ops = set(self.calls.get("audit", {}).get("ops", []))
        if ref_ops and ref_ops <= cand_ops:
            return Check("torch_delegation", False, f"every compute op of the reference still runs in torch ({', '.join(sorted(ref_ops))}): the kernels do not do the job")
        return Check("torch_delegation", True, f"torch compute ops still used: {', '.join(sorted(cand_ops))}" if cand_ops else "no torch compute op used")

    def same_inputs(self) -> Check:
        ref_sums, cand_sums = self.reference.result["checksums"], self.result.get("checksums", {})
        differ = [n for n, s in cand_sums.items() if not _close_sums(s, ref_sums.get(n))]
        return Check("same_inputs", not differ, f"inputs regenerated differently for {', '.join(differ)}" if differ else "reference and candidate saw the same inputs")

    def output_structure(self) -> Check:
        structure = self.reference.result["structure"]
        for name, call in self.calls.items():
            ref_name = self._reference_name(name)
            expected = structure[ref_name]
            if call["kind"] != expected["kind"]:
                return Check("output_structure", False, f"call {name} returned {call['kind']}, the reference returns {expected['kind']}")
            for i, (out, ref) in enumerate(zip(call["tensors"], expected["tensors"])):
                if (out["shape"], out["dtype"]) != (ref["shape"], ref["dtype"]):
                    return Check("output_structure", False, f"call {name} output {i}: {out['shape']} {out['dtype']}, reference {ref['shape']} {ref['dtype']}")
        return Check("output_structure", True, "same type, count, shapes and dtypes as the reference")

    def _reference_name(self, call_name: str) -> str:
        if call_name.startswith("repeat_"):
            return self.reference.input_sets[0]["name"]
        if call_name == "audit":
            return self.reference.input_sets[1 % len(self.reference.input_sets)]["name"]
        return call_name

    def correctness(self) -> Check:
        degenerate = self.reference.degeneracy.degenerate
        names = list(self.calls) + [s["name"] for s in self.reference.timed_sets if s["name"] in self.outputs]
        missing = [s["name"] for s in self.reference.timed_sets if "timing" in self.result and s["name"] not in self.outputs]
        full = {s["name"] for s in self.reference.input_sets}
        for name in names:
            ref = self.reference.outputs[self._reference_name(name)]
            if name not in full:
                ref = [compare.subsample(r, self.verdict.sample) for r in ref]
            outs = self.outputs.get(name, [])
            self.verdict.trials.append(compare.compare_outputs(name, outs, ref, degenerate=degenerate, device=self.compare_device))
        failed = [t for t in self.verdict.trials if not t.passed]
        if missing:
            return Check("correctness", False, f"no output kept for timed set(s) {', '.join(missing)}")
        if failed:
            return Check("correctness", False, f"{failed[0].name}: {failed[0].detail}" + (f" (and {len(failed) - 1} more call(s))" if len(failed) > 1 else ""))
        worst = max((t.max_abs_err or 0.0) for t in self.verdict.trials)
        return Check("correctness", True, f"{len(self.verdict.trials)} calls match (max abs error {worst:.3g})")

    def side_stream(self) -> Check:
        if "timing" not in self.result:
            return Check("side_stream", None, "no device timing on this device")
        event, wall = self.result["timing"]["median_ms"], self.result["timing_wall"]["median_ms"]
        gamed = wall > event * SIDE_STREAM_RATIO + SIDE_STREAM_SLACK_MS
        detail = f"event time {event:.4g} ms, time to full-device sync {wall:.4g} ms"
        return Check("side_stream", not gamed, ("work ran outside the timed stream: " if gamed else "") + detail)

    def physical_limit(self) -> Check:
        if "timing" not in self.result:
            return Check("physical_limit", None, "no device timing on this device")
        ref = self.reference.result
        measured = self.result["timing"]["median_ms"]
        bandwidth = ref.get("copy_bandwidth_bytes_per_s") or 0.0
        floors = []
        if bandwidth:
            floors.append((ref["min_bytes"] / bandwidth * 1e3, f"{ref['min_bytes'] / 1e6:.1f} MB at {bandwidth / 1e12:.2f} TB/s"))
        peak = _peak_flops(ref.get("environment", {}).get("gpu", ""), self.reference.dtypes)
        if peak and ref.get("flops"):
            floors.append((ref["flops"] / peak * 1e3, f"{ref['flops'] / 1e9:.1f} GFLOP at {peak / 1e12:.0f} TFLOP/s"))
        if not floors:
            return Check("physical_limit", None, "no ceiling known for this device")
        floor_ms, why = max(floors)
        self.floor_ms = floor_ms
        ok = measured >= floor_ms * PHYSICAL_LIMIT_MARGIN
        detail = f"measured {measured:.4g} ms, physical floor {floor_ms:.4g} ms ({why})"
        return Check("physical_limit", ok, ("faster than physically possible: " if not ok else "") + detail)


def _close_sums(a: list, b: list | None) -> bool:
    if b is None or len(a) != len(b):
        return False
    return all(x == y or (x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(y))) for x, y in zip(a, b))


def _peak_flops(gpu: str, dtypes: frozenset[str]) -> float | None:
    for name, peaks in PEAK_FLOPS.items():
        if name in gpu:
            return peaks["half"] if dtypes & {"float16", "bfloat16"} else peaks["float32"]
    return None
