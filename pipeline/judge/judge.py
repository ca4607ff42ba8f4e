"""`evaluate(problem, candidate, options) -> EvalResult`: the strict verdict on one candidate.

The reference runs in one fresh worker, the candidate in another; the candidate never sees the reference outputs,
and every comparison and verdict is made here, in a process no candidate code has run in.

The trust boundary: whatever the candidate's process says is a claim. This process owns every fact that decides a
verdict. It draws every input of the check from the operating system's randomness (`Draw`) and reveals each to
the candidate's worker only when it is needed: the checked calls' inputs once the candidate is constructed, each
extra call's subsample once that call has returned, the timed calls' inputs once the checked calls are done. It
allocates where outputs go and reads them itself (pipeline.judge.tensorfile), compares each call's outputs with
the reference's as both arrive (`Comparer`), times the worker's timed trials on its own clock, applies the
timeouts on its own clock, and treats anything off the protocol on the channel as tampering.

What does not change between candidates is kept: a problem's reference facts (its output structure, the work it
does, its eager and torch.compile baselines, its physical floor, the calibration of the clocks) in memory for the
Judge's life and on disk (pipeline.judge.refcache) for any later process. Its outputs are recomputed for each
check's fresh inputs, by a reference worker that runs beside the candidate's start-up and checked calls; the
candidate is timed only once that worker has ended.
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from pipeline.judge import compare, limits
from pipeline.judge.audit import audit_source
from pipeline.judge.draw import AGAIN, HIDDEN_TRIALS, Draw
from pipeline.judge.refcache import ReferenceCache, cache_key, environment_fingerprint
from pipeline.judge.sandbox import Handlers, InfraError, Job, JobOutcome, WorkerPool, default_cache_root
from pipeline.judge.verdict import Verdict
from pipeline.types import Candidate, Check, EvalOptions, EvalResult, Finding, Flag, Problem, Status, TrialResult

# Reads a candidate's source and returns the cheat patterns in it (pipeline.judge.audit.audit_source).
Auditor = Callable[..., tuple[Finding, ...]]
REFERENCE_TIMEOUT_S = 1800.0
DERIVE_MIN_S = 20.0  # the reference's probing of other shapes has at least this (pipeline.judge.resize)
DEFAULT_CACHE = "default"  # Judge(cache_dir=...): the reference cache under $EGG_CACHE (None: no disk cache)
# How many bytes of reference outputs the judge lets the reference's worker run ahead of the candidate, at most
# (and on a GPU at most an eighth of its memory: on an 80 GB card, 4 GB outputs are let run 2 sets ahead, not 4).
REFERENCE_AHEAD_BYTES = {"cuda": 16 << 30, "cpu": 2 << 30}
AHEAD_SHARE_OF_DEVICE = 8
# Candidate outputs that came before the reference's wait on the GPU up to this many bytes (or one set), else on the host.
WAITING_ON_DEVICE_BYTES = 1 << 30
DISPUTE_BYTES = 1 << 30  # candidate and reference outputs kept for the float64 referee on the comparison's device
# and, when that is a GPU, more in host memory: a batched GEMM's 533 MB output at another batch, both sides, did not fit
# 1 GiB, so an exact kernel closer to float64 than cuBLAS was refused unrefereed (bench/results/2026-12-07-s27)
HOST_DISPUTE_BYTES = 8 << 30
FIRST_TRIAL = "trial_1"  # the set whose recorded outputs size every set's (pipeline.judge.draw names it so)



class ReferenceError(Exception):
    """The problem itself could not be run: never blamed on a candidate."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class DoesNotFit(ReferenceError):
    """The problem needs more memory, as judged, than this machine has: said with the numbers before any job runs."""


# The reference's facts -------------------------------------------------------------------------------------------


@dataclass
class Reference:
    """A problem's reference facts (cached), as JSON data: `result` is what the full reference run reported (its
    output structure, work, costs, baselines), plus the degeneracy verdict, the usable hidden trials, notes, the
    clock calibration. `source` says where the facts came from this time: memory, disk or computed."""

    result: dict[str, Any]
    degeneracy: compare.Degeneracy
    hidden: tuple[str, ...]
    notes: list[str] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)
    source: str = "computed"
    worker_phase_s: dict[str, float] = field(default_factory=dict)

    @property
    def dtypes(self) -> frozenset[str]:
        return frozenset(t["dtype"] for s in self.result["structure"].values() for t in s["tensors"])

    def facts(self) -> dict[str, Any]:
        return {"result": self.result, "degeneracy": {"degenerate": self.degeneracy.degenerate, "reason": self.degeneracy.reason},
                "hidden": list(self.hidden), "notes": self.notes, "calibration": self.calibration}

    @classmethod
    def from_facts(cls, facts: dict[str, Any], source: str) -> Reference:
        d = facts["degeneracy"]
        return cls(facts["result"], compare.Degeneracy(d["degenerate"], d["reason"]), tuple(facts["hidden"]), list(facts["notes"]),
                   dict(facts.get("calibration", {})), source)


class Judge:
    """Evaluates candidates on one device, caching each problem's reference facts in memory and on disk. Use as a
    context manager.

    cache_dir: where reference facts are kept between processes (default `$EGG_CACHE/references`; None keeps none;
    or a ReferenceCache). keep_references: how many problems' facts stay in memory."""

    def __init__(self, options: EvalOptions, pool: WorkerPool | None = None, auditor: Auditor = audit_source,
                 cache_dir: str | Path | ReferenceCache | None = DEFAULT_CACHE, keep_references: int = 8) -> None:
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
        self.reference_timeout_s = REFERENCE_TIMEOUT_S

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

    # reference facts -----------------------------------------------------------------------------------------------

    def reference(self, problem: Problem) -> Reference:
        """The problem's reference facts: from memory, the disk cache, or a full reference run (once per problem)."""
        known = self._known_reference(problem)
        if known is not None:
            return known
        draw = self.draw(None)
        spec = {"kind": "reference", "mode": "full", "problem_path": problem.path, "options": _worker_options(self.options),
                "sets": list(draw.checked), "timed_sets": list(draw.timed_sets), "derive": self.options.other_shapes,
                "derive_min_s": DERIVE_MIN_S}
        job = self.pool.start(spec, self.pool.new_workdir("reference"), compile_timeout_s=self.reference_timeout_s,
                              run_timeout_s=self.reference_timeout_s, read_only=(problem.path,),
                              cache_key=f"reference-{problem.fingerprint[:16]}")
        return self._finish_full(problem, draw, job.wait())

    def _known_reference(self, problem: Problem) -> Reference | None:
        kept = self._references.get(problem.fingerprint)
        if kept is not None:
            self._references.move_to_end(problem.fingerprint)
            return dataclasses.replace(kept, source="memory", worker_phase_s={})
        facts = self.cache.load(self._key(problem))
        if facts is None:
            return None
        try:
            return self._keep(problem, Reference.from_facts(facts, "disk"))
        except (KeyError, TypeError, ValueError):
            self.cache.remove(self._key(problem))
            return None

    def _key(self, problem: Problem) -> str:
        if self._environment is None:
            self._environment = environment_fingerprint(self.compare_device if self.options.device == "cuda" else "cpu")
        return cache_key(problem.fingerprint, self.options, self._environment)

    def draw(self, reference: Reference | None, other_shapes: bool = False) -> Draw:
        """A fresh draw for one check: the hidden trials the reference can take (all asked for, on its first run),
        and with `other_shapes` the inputs of other shapes it runs on (its first run found them)."""
        opts = self.options
        switches = (opts.signed_trial, opts.scaled_trial, opts.outlier_trial, opts.ties_trial, opts.large_trial)
        wanted = tuple(k for k, on in zip(HIDDEN_TRIALS, switches, strict=True) if on)
        hidden = wanted if reference is None else tuple(k for k in wanted if k in reference.hidden)
        derived = tuple(reference.result.get("derived", [])) if reference is not None and other_shapes else ()
        timed = self._timed_sets(reference) if reference is not None else (opts.timed_input_sets if self.timing_enabled else 0)
        draw = Draw.new(opts, hidden, timed, derived, other_shapes, first_run=reference is None)
        if reference is not None:
            draw_modes(draw, reference.result.get("modes", []))
        return draw

    def _timed_sets(self, reference: Reference) -> int:
        """The timed input sets of a check: the options' number, cut on a GPU to what fits beside the reference
        (pipeline.judge.limits.fitting_timed_sets)."""
        if not self.timing_enabled:
            return 0
        footprint = self._footprint(reference, self.options.timed_input_sets)
        return limits.fitting_timed_sets(footprint, _device_total_bytes()) if self.compare_device == "cuda" else footprint.timed_sets

    def _ahead(self, reference: Reference) -> int:
        """How many checked sets of reference outputs the reference's worker may compute before the judge lets go
        of earlier ones: REFERENCE_AHEAD_BYTES' worth (an eighth of the GPU at most), and never fewer than 2."""
        return max(2, _ahead_bytes(self.compare_device) // max(1, _output_bytes(reference, FIRST_TRIAL)))

    def footprint(self, reference: Reference) -> limits.Footprint:
        """The judge's footprint for this problem (pipeline.judge.limits.Footprint), from its recorded sizes."""
        return self._footprint(reference, self._timed_sets(reference))

    def _footprint(self, reference: Reference, timed: int) -> limits.Footprint:
        result = reference.result
        outputs = _output_bytes(reference, FIRST_TRIAL)
        weights = int(result.get("weight_bytes", 0))
        # facts cached before the input bytes were recorded: the problem's bytes less its outputs (weights included)
        inputs = int(result.get("input_bytes", max(0, int(result.get("min_bytes", 0)) - outputs - weights)))
        derived = len(reference.result.get("derived", []))
        checked = self.options.correctness_trials + len(reference.hidden) + derived + min(derived, AGAIN)
        return limits.Footprint(inputs, outputs, weights, min(self._ahead(reference), max(1, checked)), timed)

    def job_limits(self, footprint: limits.Footprint) -> limits.Limits:
        return limits.problem_limits(footprint, self.options.device)

    def check_fits(self, footprint: limits.Footprint) -> None:
        """DoesNotFit, with needed vs available bytes, when the machine cannot hold the check of this problem."""
        device_total = _device_total_bytes() if self.compare_device == "cuda" else None
        why = footprint.does_not_fit(self.options.device, limits.machine_memory_bytes(), device_total)
        if why:
            raise DoesNotFit(why)

    def _start_reference(self, problem: Problem, draw: Draw, comparer: Comparer, reference: Reference,
                         job_limits: limits.Limits | None = None) -> Job:
        """The reference's outputs for this check's draw, computed beside the candidate, at most `ahead` checked sets
        before the judge has let go of earlier ones (each release sends the worker a `next`)."""
        spec = {"kind": "reference", "mode": "outputs", "problem_path": problem.path, "options": _worker_options(self.options),
                "sets": draw.reference_sets(), "checked": len(draw.checked), "ahead": self._ahead(reference)}
        handlers = Handlers(check=comparer.check_reference, outputs=comparer.reference_outputs, call=comparer.reference_refused)
        job = self.pool.start(spec, self.pool.new_workdir("reference"), compile_timeout_s=self.reference_timeout_s,
                              run_timeout_s=self.reference_timeout_s, read_only=(problem.path,),
                              cache_key=f"reference-{problem.fingerprint[:16]}", handlers=handlers, job_limits=job_limits)
        comparer.on_release = lambda: job.send({"type": "next"})
        return job

    def _reference_result(self, outcome: JobOutcome) -> dict[str, Any]:
        """The reference worker's result, or ReferenceError with its story."""
        try:
            result = outcome.result
            if outcome.tampering:  # the judge ended it for a message off the protocol: that, not the kill, is the story
                raise ReferenceError(f"the reference problem failed to run: the judge ended its worker for {outcome.tampering[0]}",
                                     outcome.log_tail)
            if result is None or "failure" in result:
                why = result["failure"]["message"] if result else (outcome.result_error or _exit_story(outcome))
                raise ReferenceError(f"the reference problem failed to run: {why}", outcome.log_tail)
            if outcome.output_errors:
                call, why = next(iter(outcome.output_errors.items()))
                raise ReferenceError(f"the reference's outputs of {call} could not be read: {why}", outcome.log_tail)
            return result
        finally:
            shutil.rmtree(outcome.workdir, ignore_errors=True)  # candidates must not find the reference outputs on disk

    def _finish_full(self, problem: Problem, draw: Draw, outcome: JobOutcome) -> Reference:
        """Facts from a full reference run: the hidden trials it can take, the degeneracy, the calibration."""
        result = self._reference_result(outcome)
        unusable = set(result.get("hidden_unusable", []))
        unneeded = set(result.get("hidden_unneeded", []))  # ties where the reference returns no integers: nothing to break
        notes = [f"{name}-input trial skipped: the reference itself gives NaN/Inf on {name} inputs" for name in sorted(unusable - unneeded)]
        hidden = tuple(s["name"] for s in draw.hidden if s["name"] not in unusable | unneeded)
        if not hidden and (self.options.signed_trial or self.options.scaled_trial or self.options.outlier_trial or self.options.large_trial):
            notes.append("no hidden trial: the reference gives NaN/Inf on signed, scaled, outlier and large inputs alike")
        d = result.get("degeneracy") or {"degenerate": False, "reason": ""}
        reference = Reference(result, compare.Degeneracy(d["degenerate"], d["reason"]), hidden, notes,
                              _calibration(result, outcome.marks), "computed", dict(result.get("phase_s", {})))
        self.cache.store(self._key(problem), reference.facts())
        return self._keep(problem, reference)

    def _keep(self, problem: Problem, reference: Reference) -> Reference:
        self._references[problem.fingerprint] = reference
        self._references.move_to_end(problem.fingerprint)
        while len(self._references) > max(self.keep_references, 1):
            self._references.popitem(last=False)
        return reference

    # candidate -----------------------------------------------------------------------------------------------------

    def evaluate(self, problem: Problem, candidate: Candidate, *, other_shapes: bool | None = None) -> EvalResult:
        """Judge one candidate. Never raises for anything the candidate does, nor for a fault of the judge's own:
        infrastructure faults and internal errors become infra_error with their story. `other_shapes`: call it on
        inputs of other shapes too, in the same check (None: as the options say; pipeline.judge.shapes)."""
        start = time.monotonic()
        shaped = self.options.other_shapes if other_shapes is None else other_shapes
        try:
            verdict = self._evaluate_once(problem, candidate, shaped)
        finally:
            self._release_device_memory()
        if _side_stream_only(verdict):
            # The host's clock to a full-device sync is noisy on a shared machine: an honest tiny kernel read 0.059-
            # 0.073 ms against 0.054 allowed in 3 of some 30 H200 runs, a cheat 0.23 ms every time. A second,
            # complete evaluation (fresh inputs, fresh worker) decides, and its times are the ones reported: a
            # ban needs both to fail, and a pass never reports the times of the run that failed.
            try:
                again = self._evaluate_once(problem, candidate, shaped)
            finally:
                self._release_device_memory()
            first = next(c for c in verdict.checks if c.name == "side_stream")
            if _side_stream_only(again):
                verdict = dataclasses.replace(again, reason=f"{again.reason} (the second of two timings; the first: {first.detail})")
            else:
                note = Flag("side_stream_retimed", f"the first timing failed the side-stream check ({first.detail}); this second one decides")
                verdict = dataclasses.replace(again, flags=(*again.flags, note))
        phases = dict(verdict.judge_phase_s, total=round(time.monotonic() - start, 3))
        return dataclasses.replace(verdict, duration_s=round(time.monotonic() - start, 3), judge_phase_s=phases)

    def _release_device_memory(self) -> None:
        """Give the GPU memory this process compared outputs in back to the driver once a check ends: torch's caching
        allocator kept it reserved, and the next check's workers (another process each) could not have it. A 16 GB
        pooling problem's re-verification ran its reference out of device memory beside the 52 GB the first check's
        comparisons had left reserved here (bench/results/2026-12-07-s27)."""
        if self.compare_device == "cuda":
            torch.cuda.empty_cache()

    def _evaluate_once(self, problem: Problem, candidate: Candidate, other_shapes: bool) -> EvalResult:
        base = EvalResult(Status.INFRA_ERROR, "", problem, candidate, self.options.device)
        try:
            verdict = Evaluation(self, problem, candidate, other_shapes).run()
        except ReferenceError as exc:
            verdict = dataclasses.replace(base, reason=str(exc), log_tail=exc.log_tail)
        except InfraError as exc:
            verdict = dataclasses.replace(base, reason=f"sandbox failure: {exc}")
        except Exception as exc:  # the judge's own bug: a verdict that says so, never a traceback without JSON
            verdict = dataclasses.replace(base, reason=f"the judge failed: {type(exc).__name__}: {exc}", log_tail=traceback.format_exc()[-4000:])
        return verdict

    def warn(self, message: str) -> None:
        """A one-line warning on stderr, once per Judge."""
        if message not in self._warned:
            self._warned.add(message)
            print(f"egg: warning: {message}", file=sys.stderr)


def _side_stream_only(result: EvalResult) -> bool:
    """Banned by the run-time side-stream check and by nothing before it (the first failure names the status; the
    static audit's side_stream rule reads "side_stream (line N)" and is never retimed)."""
    failed = any(c.name == "side_stream" and c.passed is False for c in result.checks)
    return failed and result.status is Status.BANNED and result.reason.startswith("side_stream:")


def evaluate(problem: Problem, candidate: Candidate, options: EvalOptions | None = None, **judge_options) -> EvalResult:
    """Judge one candidate against one problem (a fresh worker pool for this call alone; the disk cache of
    reference facts is used unless `cache_dir=None`)."""
    with Judge(options or EvalOptions(), **judge_options) as judge:
        return judge.evaluate(problem, candidate)


def _worker_options(options: EvalOptions) -> dict[str, Any]:
    data = dataclasses.asdict(options)
    data["baselines"] = list(options.baselines)
    return data


def _exit_story(outcome: JobOutcome) -> str:
    phase = outcome.phase or "start-up"
    if outcome.timed_out == "memory":
        return (f"over the memory limit of {outcome.memory_limit_bytes / 2**30:.3g} GB: its processes held "
                f"{outcome.peak_rss_bytes / 2**30:.3g} GB when the judge ended it (phase {phase})")
    if outcome.timed_out:
        return f"its {outcome.timed_out} phase ({phase}) ran past its limit and was killed"
    if outcome.returncode is None:
        return f"no exit status (phase {phase})"
    if outcome.returncode < 0:
        try:
            sig = signal.Signals(-outcome.returncode).name
        except ValueError:  # a real-time signal has no name of its own
            sig = f"signal {-outcome.returncode}"
        hint = " (killed: often out of memory)" if sig == "SIGKILL" else ""
        return f"the process died from {sig}{hint} during phase {phase}"
    return f"the process exited with code {outcome.returncode} during phase {phase}"


def _calibration(result: dict[str, Any], marks: dict[str, float]) -> dict[str, Any]:
    """How the reference's own timing of its eager baseline looked from this side: the time the parent's clock saw
    around its trials beyond what the worker's times explain (per trial), and its median host-to-sync gap, eager,
    (when graphs are timed) replayed as a CUDA graph, and for the judge's own one-block Triton kernel."""
    sums = result.get("baseline_sums", {}).get("eager")
    start, end = marks.get("trials_start:eager"), marks.get("trials_end:eager")
    if not sums or start is None or end is None or not sums.get("trials"):
        return {}
    bracket_ms = (end - start) * 1e3
    explained_ms = sums["event_ms"] + sums["launch_ms"]
    graphed = result.get("baseline_sums", {}).get("eager_graph") or {}
    return {"overhead_ms_per_trial": max(0.0, (bracket_ms - explained_ms) / sums["trials"]), "wall_gap_ms": sums.get("wall_gap_ms", 0.0),
            "wall_gap_graph_ms": graphed.get("wall_gap_ms", sums.get("wall_gap_ms", 0.0)),
            "wall_gap_triton_ms": result.get("triton_launch_gap_ms", 0.0)}


# Comparing as outputs arrive -------------------------------------------------------------------------------------


class Comparer:
    """Pairs each candidate call's outputs with the reference's as both arrive, compares them, and lets both go
    (GiB outputs are never all held at once). Fed from the jobs' channel threads."""

    def __init__(self, draw: Draw | None, degeneracy: compare.Degeneracy, device: str, repeats: int,
                 structure: dict[str, Any] | None = None) -> None:
        self.draw, self.degeneracy, self.device = draw, degeneracy, device
        self.structure = structure  # the reference's output structure by set, when known ahead
        self.reference: dict[str, list[torch.Tensor]] = {}
        self.candidate: dict[str, list[torch.Tensor]] = {}
        self.shapes: dict[str, list[tuple[str, list[int]]]] = {}  # what the candidate's calls handed over
        self.results: dict[str, TrialResult] = {}
        self._repeats_left = repeats
        # the first trial's reference cut to each repeat's subsample, taken as the trial itself is compared, so the
        # whole set goes back at once (a GiB output is not held until the last repeat)
        self.repeat_refs: dict[str, list[torch.Tensor]] = {}
        self._asked: set[str] = set()
        self.refused: set[str] = set()  # calls on inputs of other shapes the candidate refused: nothing to compare
        self.not_owed: dict[str, str] = {}  # sets of other shapes the reference refused with this draw, and why
        self.on_release: Callable[[], None] = lambda: None  # a checked set's reference output was let go
        # calls whose fp32 outputs missed on tolerance alone, with the reference's, for the float64 referee
        self.disputed: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self.refereed: dict[str, str] = {}  # the calls the referee settled, and how
        self.trial_clock: list[float] = []
        self._lock = threading.Lock()

    def start(self, draw: Draw, degeneracy: compare.Degeneracy, structure: dict[str, Any]) -> None:
        """The check's draw, once the reference's facts are known (the candidate's worker starts before)."""
        with self._lock:
            self.draw, self.degeneracy, self.structure = draw, degeneracy, structure

    def reference_outputs(self, call: str, tensors: list[torch.Tensor]) -> None:
        with self._lock:
            if call in self.refused:
                self.on_release()
                return
            self.reference[call] = [t.to(self.device) for t in tensors]
            for name in [n for n in self.candidate if self.draw.reference_name(n) == call]:
                self._compare(name)

    def check_candidate(self, call: str, specs: list[tuple[torch.dtype, tuple[int, ...]]]) -> str:
        """Why the candidate may not hand over these outputs ('' when it may): a call the judge did not make, or
        more bytes than the reference's outputs of that call (the candidate decides no size of the judge's)."""
        if self.draw is None:
            return f"outputs of {call!r} before the judge asked for any"
        known = {s["name"] for s in self.draw.checked} | set(self.draw.offsets) | self.draw.shaped_names
        if call not in known or (self.draw.is_timed_trial(call) and call not in self._asked):
            return f"outputs of a call {call!r} the judge never made"
        if self.structure is not None:
            first = self.structure.get(self.draw.trials[0]["name"], {})
            expected = self.structure.get(self.draw.source_name(call), first).get("tensors", [])
            limit = sum(_nbytes(t["dtype"], t["shape"]) for t in expected)
            if call in self.draw.shaped_names:  # the problem's own size on another shape: a wrong answer, compared
                limit = max(limit, sum(_nbytes(t["dtype"], t["shape"]) for t in first.get("tensors", [])), self._drawn_bytes(call))
            given = sum(_nbytes(str(d).removeprefix("torch."), list(s)) for d, s in specs)
            if given > limit:
                return f"call {call} handed over {given} bytes of outputs, more than the reference's {limit}"
        return ""

    def check_reference(self, call: str, specs: list[tuple[torch.dtype, tuple[int, ...]]]) -> str:
        """Why the reference's worker may not hand over these outputs: more bytes than its own first run recorded
        for that set (a problem's code could claim a size the judge would then allocate)."""
        if self.structure is None:
            return ""
        first = self.structure.get(self.draw.trials[0]["name"], {}) if self.draw else {}
        expected = self.structure.get(self.draw.source_name(call) if self.draw else call, first).get("tensors", [])
        limit = sum(_nbytes(t["dtype"], t["shape"]) for t in expected)
        if self.draw and call in self.draw.shaped_names:  # a size drawn for this check: the problem's, the first run's, or the growth limit
            limit = max(limit, sum(_nbytes(t["dtype"], t["shape"]) for t in first.get("tensors", [])), self._drawn_bytes(call))
        given = sum(_nbytes(str(d).removeprefix("torch."), list(s)) for d, s in specs)
        return f"the reference's {call} handed over {given} bytes of outputs, more than its recorded {limit}" if given > limit else ""

    def _drawn_bytes(self, call: str) -> int:
        """A set asked for again at a size drawn above its source's (up to 16n + 15): the growth limit its plan had
        (pipeline.judge.resize), the most bytes of outputs taken there; 0 for any other call."""
        spec = next((s for s in self.draw.derived if s["name"] == self.draw.reference_name(call)), {})
        return int(spec["resize"].get("bytes", 0)) if spec.get("again") else 0

    def reference_refused(self, record: dict[str, Any]) -> None:
        """The reference refused a set of another shape drawn afresh (its first run took that shape with another
        draw): the candidate owes nothing there, and whatever it handed over for it goes."""
        name = record.get("name")
        if not record.get("refused") or self.draw is None or name not in {s["name"] for s in self.draw.derived}:
            return
        with self._lock:
            if name in self.not_owed:
                return
            self.not_owed[name] = str(record["refused"])[:300]
            for call in [c for c in self.candidate if self.draw.reference_name(c) == name]:
                del self.candidate[call]
            self.on_release()

    def call_record(self, record: dict[str, Any]) -> None:
        """A call's record as it returned: a refused call on inputs of another shape lets its reference go."""
        name = record.get("name")
        if not record.get("refused") or self.draw is None or name not in self.draw.shaped_names:
            return
        with self._lock:
            self.refused.add(name)
            if self.reference.pop(name, None) is not None:
                self.on_release()

    def candidate_outputs(self, call: str, tensors: list[torch.Tensor]) -> None:
        with self._lock:
            if self.draw.reference_name(call) in self.refused:  # answered when asked again after a refusal: nothing
                return  # to compare, the check fails (pipeline.judge.shapes)
            if self.draw.reference_name(call) in self.not_owed:
                return
            self.shapes[call] = [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in tensors]
            self.candidate[call] = tensors
            # a timed trial's outputs wait for the end: comparing on the GPU now would run beside the timing
            ready = call in self.repeat_refs or self.draw.reference_name(call) in self.reference
            if not self.draw.is_timed_trial(call) and ready:
                self._compare(call)
            elif self.device == "cuda" and self._waiting_on_device() > max(WAITING_ON_DEVICE_BYTES, _bytes(tensors)):
                # a candidate faster than the reference handed over every checked set before the first compare (8
                # sets of 6 GB on an 80 GB card): what waits beyond one set waits on the host
                self.candidate[call] = [t.cpu() for t in tensors]  # its GPU memory goes back as `tensors` does

    def _waiting_on_device(self) -> int:
        return sum(_bytes([t for t in ts if t.is_cuda]) for ts in self.candidate.values())

    def finish(self) -> None:
        """Compare what waited (the timed trials' outputs) once the candidate's worker has ended."""
        with self._lock:
            for call in [c for c in self.candidate if c in self.repeat_refs or self.draw.reference_name(c) in self.reference]:
                self._compare(call)

    def _compare(self, call: str) -> None:
        name = self.draw.reference_name(call)
        if call in self.repeat_refs:
            refs = self.repeat_refs.pop(call)
        else:
            refs = self.reference[name]
            if call.startswith("repeat_"):
                refs = [compare.subsample(r, self.draw.sample(call)) for r in refs]
        outs = self.candidate.pop(call)
        self.results[call] = compare.compare_outputs(call, outs, refs, degenerate=self.degeneracy.degenerate, device=self.device)
        if self._disputable(call, refs):
            where = dispute_place(_bytes(outs) + _bytes(refs), self.device, self._disputed_bytes(self.device), self._disputed_bytes("cpu"))
            if where:
                self.disputed[call] = (outs, refs) if where == self.device else ([t.cpu() for t in outs], [t.cpu() for t in refs])
        del outs, refs
        if call.startswith("repeat_"):
            self._repeats_left -= 1
        first = name == self.draw.trials[0]["name"]
        if first and call == name and self._repeats_left > 0:
            whole = self.reference[name]
            for repeat in self._repeats_to_come():
                self.repeat_refs[repeat] = [compare.subsample(r, self.draw.sample(repeat)).clone() for r in whole]
            if self.device == "cuda":
                torch.cuda.synchronize()  # the copies are made before the whole set's memory goes back
            del whole
        if not first or call == name or self._repeats_left <= 0:
            if self.reference.pop(name, None) is not None and name in {s["name"] for s in self.draw.checked}:
                self.on_release()

    def _disputable(self, call: str, refs: list[torch.Tensor]) -> bool:
        """A miss the float64 referee may settle: fp32 values outside the tolerance by no more than rounding can
        explain (compare.REFEREE_SCALE of the output's scale: a wrong formula misses by the values themselves), on a
        set the reference can compute again (the checked sets and the audit call; not repeats or timed trials). On a
        degenerate problem too: the referee then also asks for the error relative to the reference's variation."""
        result = self.results[call]
        if not compare.disputable(result):
            return False
        scale = max((float(r.abs().max()) for r in refs if r.is_floating_point() and r.numel()), default=0.0)
        if (result.max_abs_err or 0.0) > compare.REFEREE_SCALE * scale:
            return False
        return call == self.draw.audit["name"] or self.draw.reference_name(call) in {s["name"] for s in self.draw.checked}

    def _disputed_bytes(self, device: str) -> int:
        """The bytes of disputed outputs kept on `device` ("cpu": host memory)."""
        return sum(_bytes([t for t in (*outs, *refs) if t.device.type == device]) for outs, refs in self.disputed.values())

    def referee_sets(self) -> list[dict[str, Any]]:
        """The sets the referee computes in float64: each disputed call's own (the audit call's with its subsample)."""
        names = {self.draw.reference_name(call) for call in self.disputed}
        return [s for s in self.draw.reference_sets() if s["name"] in names]

    def check_referee(self, call: str, specs: list[tuple[torch.dtype, tuple[int, ...]]]) -> str:
        """The referee's outputs: float64, so twice the bytes the reference recorded for that set."""
        if call not in {s["name"] for s in self.referee_sets()}:
            return f"the float64 reference handed over outputs of {call!r}, a set it was not asked for"
        halved = [(torch.float32 if d == torch.float64 else d, s) for d, s in specs]
        return self.check_reference(call, halved)

    def referee_outputs(self, name: str, tensors: list[torch.Tensor]) -> None:
        """The float64 reference's outputs of a set: each disputed call on it passes if the referee says so."""
        with self._lock:
            for call in [c for c in self.disputed if self.draw.reference_name(c) == name or c == name]:
                outs, refs = self.disputed.pop(call)
                passed, detail = compare.referee(outs, refs, [t.to(self.device) for t in tensors], device=self.device,
                                                 degenerate=self.degeneracy.degenerate)
                if passed:
                    old = self.results[call]
                    self.results[call] = dataclasses.replace(old, passed=True, detail=detail)
                    self.refereed[call] = f"{old.detail.split(';')[0]} against the fp32 reference, but {detail}"
                else:
                    self.refereed[call] = ""
                    self.results[call] = dataclasses.replace(self.results[call], detail=f"{self.results[call].detail}; float64 referee: {detail}")

    def _repeats_to_come(self) -> list[str]:
        return [c for c in self.draw.offsets if c.startswith("repeat_") and c not in self.results]

    def sample(self, call: str) -> dict[str, int] | None:
        """The subsample of an extra call's outputs, revealed once that call has returned: {} for a timed trial that
        is not compared, None for a call the judge never made or one asked for twice."""
        with self._lock:
            if self.draw is None or call in self._asked or not (call in self.draw.offsets or self.draw.is_timed_trial(call)):
                return None
            self._asked.add(call)
            if self.draw.is_timed_trial(call):
                self.trial_clock.append(time.monotonic())
        return self.draw.sample(call) or {}

    def trial_periods_ms(self) -> list[float]:
        """The parent's clock between consecutive timed trials (each asks for its sample once it has returned)."""
        return [(b - a) * 1e3 for a, b in zip(self.trial_clock, self.trial_clock[1:])]


def draw_modes(draw: Draw, modes: list[str]) -> None:
    """Each call mode the reference's first run found to give its own answers (pipeline.judge.worker.call_modes: eval,
    grad) on one checked set of the problem's shape drawn for this check, never the first trial (whose inputs the
    repeats take again): the candidate is called so there, the reference as always."""
    sets = [s for s in (*draw.trials[1:], *draw.hidden) if s.get("transform") != "ties"]
    for mode, chosen in zip(modes, secrets.SystemRandom().sample(sets, min(len(sets), len(modes)))):
        chosen["mode"] = mode


def _output_bytes(reference: Reference, name: str) -> int:
    """Bytes of one set's outputs, as the reference's full run recorded them."""
    tensors = reference.result["structure"].get(name, {}).get("tensors", [])
    return sum(_nbytes(t["dtype"], t["shape"]) for t in tensors)


def dispute_place(size: int, device: str, on_device: int, on_host: int) -> str:
    """Where a disputed call's outputs (`size` bytes, both sides) wait for the float64 referee: on the comparison's
    `device` while DISPUTE_BYTES allows, then, beside a GPU, in host memory up to HOST_DISPUTE_BYTES (at most a
    sixteenth of the machine's); '' when neither has room (the call stays a plain mismatch)."""
    if size <= DISPUTE_BYTES - on_device:
        return device
    if device != "cpu" and size <= min(HOST_DISPUTE_BYTES, limits.machine_memory_bytes() // 16) - on_host:
        return "cpu"
    return ""


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _ahead_bytes(device: str) -> int:
    """The bytes of outputs the judge holds on `device` ahead of their comparison, from either side."""
    budget = REFERENCE_AHEAD_BYTES[device]
    return min(budget, _device_total_bytes() // AHEAD_SHARE_OF_DEVICE) if device == "cuda" else budget


def _device_total_bytes() -> int:
    """The GPU's memory (the judge compares on it, so CUDA is already up in this process)."""
    return int(torch.cuda.mem_get_info()[1])


def _nbytes(dtype: str, shape: list[int]) -> int:
    numel = 1
    for n in shape:
        numel *= n
    dt = getattr(torch, dtype, None)
    return numel * (torch.empty((), dtype=dt).element_size() if isinstance(dt, torch.dtype) else 8)


# One evaluation --------------------------------------------------------------------------------------------------


class Evaluation:
    """One candidate through the judge: the audit, its worker and the reference's started together, the inputs
    sent when the candidate is constructed, the timing once the reference's worker has ended, then the verdict."""

    def __init__(self, judge: Judge, problem: Problem, candidate: Candidate, other_shapes: bool = False) -> None:
        self.judge, self.problem, self.candidate = judge, problem, candidate
        self.other_shapes = other_shapes  # call it on the inputs of other shapes the reference runs on, too
        self.phases: dict[str, float] = {}
        self._clock = time.monotonic()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._clock, 4)
        self._clock = now

    def run(self) -> EvalResult:
        try:
            source = Path(self.candidate.path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            return self._unreadable(f"the candidate is not UTF-8 text ({exc.reason} at byte {exc.start})")
        except OSError as exc:
            return self._unreadable(f"the candidate could not be read: {exc.strerror}")
        judge = self.judge
        judge.pool.wait_ready()  # a fresh process waits here for the worker server's imports
        self._lap("worker_server")
        reference = judge._known_reference(self.problem)
        self._lap("reference_lookup")
        audit = None
        if reference is not None:  # the dtypes are known without running anything: audit before any worker
            audit = self._audit(source, reference.dtypes)
            if audit.early is not None:
                return dataclasses.replace(audit.early(reference), judge_phase_s=self.phases, reference_source=reference.source)
        job_limits = None
        if reference is not None:  # the problem's sizes are known: whether it fits, and the limits it needs
            footprint = judge.footprint(reference)
            judge.check_fits(footprint)
            job_limits = judge.job_limits(footprint)
        jobs: list[Job] = []
        try:
            comparer = Comparer(None, compare.Degeneracy(False), judge.compare_device, judge.options.repeat_calls)
            job = self._start_candidate(comparer, job_limits)  # its start-up (a sandbox, CUDA) overlaps the reference's
            jobs.append(job)
            self._lap("start_jobs")
            if reference is None:  # the first check of this problem here: its facts first
                reference = judge.reference(self.problem)
                self._lap("reference_facts")
                footprint = judge.footprint(reference)
                judge.check_fits(footprint)
                job_limits = judge.job_limits(footprint)
                job.raise_memory_limit(job_limits.memory_bytes)  # the parent's watch (a CPU job's own limit stays)
                audit = self._audit(source, reference.dtypes)
                if audit.early is not None:
                    job.kill()
                    job.wait()
                    return dataclasses.replace(audit.early(reference), judge_phase_s=self.phases, reference_source=reference.source)
            draw = judge.draw(reference, self.other_shapes)
            comparer.start(draw, reference.degeneracy, reference.result["structure"])
            ref_job = judge._start_reference(self.problem, draw, comparer, reference, job_limits)
            jobs.append(ref_job)
            self._send_inputs(job, draw, reference)
            ref_outcome, early = self._wait_reference(ref_job, job, len(draw.checked)), None
            try:
                checksums = judge._reference_result(ref_outcome)
            except ReferenceError:
                # A candidate that ended before finishing (a crash, a forged result) cut the reference's outputs
                # short: its own ending is the verdict, and it can only be a failure.
                if not job.exited.is_set():
                    raise
                early = job.wait()
                if early.returncode == 0 and early.phase == "done" and not early.result_error:
                    raise
                checksums = {}
            self._lap("reference")
            if early is None and draw.timed_sets:
                job.send_when("wait_go", {"type": "go", "timed_sets": list(draw.timed_sets), "scales": list(draw.scales)})
            outcome = early if early is not None else job.wait()
            jobs.clear()
            comparer.finish()
            self._lap("candidate")
            referee_note = self._referee(comparer, reference, job_limits) if comparer.disputed else ""
            verdict = Verdict(judge, self.problem, self.candidate, reference, audit.check, draw, comparer, checksums)
            result = verdict.judge_outcome(outcome, self._lap)
            if referee_note and (result.ok or referee_note.startswith("the float64 referee could not run")):
                result = dataclasses.replace(result, flags=(*result.flags, Flag("fp32_refereed", referee_note)))
        except BaseException:
            for running in jobs:
                running.kill()
                running.wait()
            raise
        if reference.source == "computed":
            self.phases.update({f"reference_worker_{k}": v for k, v in reference.worker_phase_s.items()})
        self.phases.update(_worker_phases(result.phase_s))
        return dataclasses.replace(result, judge_phase_s=self.phases, reference_source=reference.source, input_seeds=draw.seeds())

    def _referee(self, comparer: Comparer, reference: Reference, job_limits: limits.Limits | None) -> str:
        """The float64 referee (pipeline.judge.compare.referee): the reference computes each set whose fp32 comparison
        missed on tolerance alone once more in float64, and the candidate passes there if it is as close to that
        truth as the fp32 reference is. What it settled, for the verdict's flag ('' when nothing)."""
        judge, sets = self.judge, comparer.referee_sets()
        spec = {"kind": "reference", "mode": "outputs", "float64": True, "problem_path": self.problem.path,
                "options": _worker_options(judge.options), "sets": sets, "checked": len(sets), "ahead": len(sets)}
        handlers = Handlers(check=comparer.check_referee, outputs=comparer.referee_outputs)
        job = judge.pool.start(spec, judge.pool.new_workdir("referee"), compile_timeout_s=judge.reference_timeout_s,
                               run_timeout_s=judge.reference_timeout_s, read_only=(self.problem.path,),
                               cache_key=f"reference-{self.problem.fingerprint[:16]}", handlers=handlers, job_limits=job_limits)
        try:
            outcome = job.wait()
            judge._reference_result(outcome)
        except ReferenceError as error:
            comparer.disputed.clear()
            self._lap("referee")
            return f"the float64 referee could not run ({error}): the fp32 comparison stands"
        comparer.disputed.clear()
        self._lap("referee")
        settled = {call: how for call, how in comparer.refereed.items() if how}
        if not settled:
            return ""
        call, how = next(iter(settled.items()))
        more = f" (and {len(settled) - 1} more call(s))" if len(settled) > 1 else ""
        return f"call {call}: {how}{more}: a long fp32 sum's own rounding, not the kernel"

    @staticmethod
    def _wait_reference(ref_job: Job, job: Job, checked: int) -> JobOutcome:
        """The reference worker's outcome. It may wait for the judge to let go of earlier outputs, which needs the
        candidate's: once the candidate's worker has ended (a crash, a timeout), it is let run to its end."""
        while not ref_job.exited.wait(0.05):
            if job.exited.is_set():
                for _ in range(checked):
                    ref_job.send({"type": "next"})
                break
        return ref_job.wait()

    def _unreadable(self, why: str) -> EvalResult:
        return EvalResult(Status.COMPILE_ERROR, why, self.problem, self.candidate, self.judge.options.device,
                          checks=(Check("static_audit", None, "not read"),))

    def _send_inputs(self, job: Job, draw: Draw, reference: Reference) -> None:
        """`start` now (the audit passed); the inputs of the checked calls once the candidate is constructed."""
        first = reference.result["structure"][draw.trials[0]["name"]]["tensors"]
        job.send({"type": "start"})
        reserve = self.judge.footprint(reference).beside_candidate_bytes() if self.judge.compare_device == "cuda" else 0
        job.send_when("wait_inputs", {"type": "inputs", "input_sets": list(draw.checked), "audit_set": draw.audit,
                                      "poison": [[t["shape"], t["dtype"]] for t in first], "reserve": reserve})

    def _audit(self, source: str, dtypes: frozenset[str]) -> Audit:
        try:
            findings = self.judge.auditor(source, reference_dtypes=dtypes)
        except SyntaxError as exc:
            check = Check("static_audit", None, "not parsed")
            why = f"syntax error at line {exc.lineno}: {exc.msg}"
            return Audit(check, lambda ref: Verdict.early(self, ref, check).result(Status.COMPILE_ERROR, why))
        finally:
            self._lap("audit")
        check = Check("static_audit", not findings, "; ".join(_finding_text(f) for f in findings) or "no cheat patterns in the source")
        if not findings:
            return Audit(check, None)
        why = _finding_text(findings[0]) + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")
        return Audit(check, lambda ref: Verdict.early(self, ref, check).result(Status.BANNED, why))

    def _start_candidate(self, comparer: Comparer, job_limits: limits.Limits | None = None) -> Job:
        spec = {
            "kind": "candidate",
            "problem_path": self.problem.path,
            "candidate_path": self.candidate.path,
            "options": _worker_options(self.judge.options),
        }
        pool, opts = self.judge.pool, self.judge.options
        waits = frozenset({"start", "inputs", "go"} if self.judge.timing_enabled else {"start", "inputs"})
        handlers = Handlers(check=comparer.check_candidate, outputs=comparer.candidate_outputs, sample=comparer.sample, waits=waits,
                            call=comparer.call_record)
        return pool.start(spec, pool.new_workdir("candidate"), compile_timeout_s=opts.compile_timeout_s, run_timeout_s=opts.run_timeout_s,
                          read_only=(self.problem.path, self.candidate.path), cache_key=f"candidate-{self.candidate.fingerprint[:16]}",
                          handlers=handlers, job_limits=job_limits)


@dataclass(frozen=True)
class Audit:
    """The static audit's check, and (when it ends the evaluation) how to build that verdict from a reference."""

    check: Check
    early: Callable[[Reference], EvalResult] | None


def _worker_phases(phase_s: dict[str, float]) -> dict[str, float]:
    """The candidate worker's phases grouped as the judge reports them."""
    grouped = {"worker_isolation": phase_s.get("isolation", 0.0), "worker_cuda_init": phase_s.get("cuda_init", 0.0),
               "worker_setup": phase_s.get("setup", 0.0), "worker_waited_for_start": phase_s.get("wait_start", 0.0),
               "worker_import_construct": phase_s.get("import", 0.0) + phase_s.get("construct", 0.0),
               "worker_waited_for_inputs": phase_s.get("wait_inputs", 0.0),
               "worker_calls": sum(phase_s.get(p, 0.0) for p in ("first_call", "correctness", "other_shapes", "repeats", "audit", "asked_again")),
               # of which: the calls on inputs of other shapes (pipeline.judge.shapes), their compiles included
               "worker_other_shapes": phase_s.get("other_shapes", 0.0) + phase_s.get("asked_again", 0.0),
               "worker_waited_for_go": phase_s.get("wait_go", 0.0), "worker_timing": phase_s.get("timing", 0.0)}
    return {k: round(v, 4) for k, v in grouped.items() if isinstance(v, (int, float))}


def _finding_text(finding: Finding) -> str:
    return f"{finding.rule} (line {finding.line}): {finding.message}"

