"""One candidate's verdict from its run: the worker's report validated, then every check in the order that decides
the status.

The worker's `result.json` comes from a process the candidate's code ran in, so it is read as claims: validated
against `WorkerReport` (a malformed one is tampering), and each claim that matters is checked against what this
process saw itself: the outputs it read and compared (`Comparer`), the protocol on the channel, its own clock
around the timed trials.
"""

from __future__ import annotations

import math

import shutil
from typing import TYPE_CHECKING, Any, Callable

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.judge import compare, shapes
from pipeline.judge.draw import Draw
from pipeline.judge.probes import LIBRARY_OPS, NOMINAL_BYTES_PER_S, library_family, work_seconds
from pipeline.judge.sandbox import JobOutcome
from pipeline.types import Candidate, Check, EvalResult, Flag, Problem, Status, Timing

if TYPE_CHECKING:
    from pipeline.judge.judge import Comparer, Evaluation, Judge, Reference

# Timing is flagged as gamed when the host-side time to a full-device sync exceeds the event time by more than this
# share plus the reference's own gap times GAP_FACTOR, at least SIDE_STREAM_SLACK_MS. The gap is the larger of its
# eager baseline's and the judge's own one-block Triton kernel's, measured the same way in the reference's worker
# (a Triton launch from Python costs the host tens of microseconds more than an eager op: on the H200 an honest
# 4-microsecond softmax kernel read 0.073 ms to the sync against an eager allowance of 0.054 ms).
# A ban by this check alone is judged again from the start (Judge.evaluate): both timings must fail.
SIDE_STREAM_RATIO, SIDE_STREAM_SLACK_MS, GAP_FACTOR = 1.10, 0.05, 3.0
# The parent's clock around the timed trials may exceed what the worker's times explain by this factor and slack;
# beyond FLAG_FACTOR the verdict carries a flag, beyond BRACKET_FACTOR the times are taken as forged. (On the H200
# honest first checks of GiB problems read up to 4.3x, which session 10 could not yet explain: see
# bench/results/2026-12-01-s10/README.md.)
BRACKET_FACTOR, FLAG_FACTOR, BRACKET_SLACK_MS = 10.0, 2.0, 20.0
# A candidate faster than this fraction of the physical floor is flagged (noise and cache effects stay below it).
PHYSICAL_LIMIT_MARGIN = 0.9
# Datasheet dense tensor peaks (FLOP/s) by device name; the floor uses the fastest precision that could pass.
PEAK_FLOPS = {"H200": {"float32": 495e12, "half": 989e12}, "H100": {"float32": 495e12, "half": 989e12}}
# torch work a candidate may keep, as a share of the reference's: a scalar, a small reduction of partial results.
NEGLIGIBLE_WORK = 0.05
# A candidate may keep at most this multiple of the reference's own work of a kind of library primitive (its GEMM
# as cuBLAS beside a fused epilogue; a split or a padded layout costs a little more than the reference's call).
LIBRARY_MARGIN = 1.5
# What a worker may report as the end of a job that failed: never a pass, nor a mismatch it cannot know of.
_FAILURE_STATUSES = {"compile_error", "runtime_error", "banned", "infra_error", "timeout"}


# The worker's report --------------------------------------------------------------------------------------------


class _Claims(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class WorkClaim(_Claims):
    ops: dict[str, int] = Field(default_factory=dict)
    library_bytes: int = 0
    library_flops: int = 0
    other_bytes: int = 0
    other_flops: int = 0
    to_host_bytes: int = 0
    calls: int = 0
    library: dict[str, list[int]] = Field(default_factory=dict)  # kind of library work -> [bytes, flops]


class TensorClaim(_Claims):
    shape: list[int]
    dtype: str


class CallClaim(_Claims):
    name: str
    kind: str
    types: list[str]
    tensors: list[TensorClaim]
    launches: int
    own_launches: int
    mutated_inputs: list[int]
    threads_after: int
    processes_after: int = 0
    processes_started: int = 0
    children_cpu_s: float = 0.0
    work: WorkClaim = Field(default_factory=WorkClaim)
    checksum: list[float | None] = Field(default_factory=list)
    refused: str = ""  # a call on inputs of another shape the candidate refused: its exception, one line
    refused_first: str = ""  # it answered, but only when called again: the first call's exception, one line
    shares_outputs_with: str = ""  # the earlier call whose outputs, still held, this call's outputs share memory with
    spoiled: list[str] = Field(default_factory=list)  # what of earlier calls this call changed: "<call>'s outputs"/"inputs"


class TimingClaim(_Claims):
    median_ms: float
    mean_ms: float
    std_ms: float
    ci95_low_ms: float
    ci95_high_ms: float
    trials: int
    method: str


class SumsClaim(_Claims):
    event_ms: float
    launch_ms: float
    wall_ms: float
    trials: int
    wall_gap_ms: float


class FailureClaim(_Claims):
    status: str
    message: str
    detail: str = ""


class StateClaim(_Claims):
    shape: list[int]
    values: list[float]


class IsolationClaim(_Claims):
    isolation: str = ""
    missing: list[str] = Field(default_factory=list)


class WorkerReport(_Claims):
    """What a candidate's worker says happened (pipeline.judge.worker.CandidateRun)."""

    kind: str = "candidate"
    isolation: IsolationClaim | dict = Field(default_factory=IsolationClaim)
    calls: list[CallClaim] = Field(default_factory=list)
    kernels: dict[str, int] = Field(default_factory=dict)
    tampering: list[str] = Field(default_factory=list)
    output_transport: str = ""
    checksums: dict[str, list[float | None]] = Field(default_factory=dict)
    state_after_first: dict[str, StateClaim] = Field(default_factory=dict)  # its floating buffers after the first call
    construction_work: WorkClaim = Field(default_factory=WorkClaim)
    timing: TimingClaim | None = None
    timing_wall: TimingClaim | None = None
    timing_launch: TimingClaim | None = None
    timing_sums: SumsClaim | None = None
    timing_graph: TimingClaim | None = None
    timing_head_start_capped: int = 0
    timed_launches: int = 0
    timed_calls: int = 0
    timed_work: WorkClaim = Field(default_factory=WorkClaim)
    threads_after_timing: int = 0
    phase_s: dict[str, float] = Field(default_factory=dict)
    failure: FailureClaim | None = None


_TIMING_FIELDS = ("timing", "timing_wall", "timing_launch", "timing_sums", "timing_graph", "timing_head_start_capped",
                  "timed_launches", "timed_calls", "timed_work", "threads_after_timing")


def read_report(result: dict[str, Any], calls: tuple[dict, ...] = (), timing: dict | None = None) -> tuple[WorkerReport | None, str]:
    """(report, '') or (None, why the worker's result is not a report). The call records and the timing summary
    are the ones the worker sent on the channel as each was done (`calls`, `timing`), not what its result file
    says at the end: a later call cannot rewrite an earlier one's record."""
    merged = {k: v for k, v in result.items() if k not in _TIMING_FIELDS}
    merged["calls"] = list(calls)
    merged["checksums"] = {c.get("name"): c.get("checksum") for c in calls if isinstance(c, dict)}
    merged.update(timing or {})
    try:
        report = WorkerReport.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return None, f"the worker's report is malformed at {where or 'its top'}: {first.get('msg', '')}"
    if report.failure is not None and report.failure.status not in _FAILURE_STATUSES:
        return None, f"the worker's report ends in a status it may not give, {report.failure.status[:40]!r}"
    return report, ""


# The verdict ----------------------------------------------------------------------------------------------------


class Verdict:
    """Builds one candidate's EvalResult from the static audit's check and its sandboxed run: every check in order."""

    def __init__(self, judge: Judge, problem: Problem, candidate: Candidate, reference: Reference, audit: Check,
                 draw: Draw | None = None, comparer: Comparer | None = None, checked_reference: dict[str, Any] | None = None) -> None:
        self.judge, self.problem, self.candidate, self.reference = judge, problem, candidate, reference
        self.draw, self.comparer = draw, comparer
        self.checked_reference = checked_reference or reference.result  # this check's reference run (checksums)
        self.options = judge.options
        self.checks: list[Check] = [audit]
        self.trials: list = []
        self.generality = ""  # on inputs of other shapes (pipeline.judge.shapes), once judged
        self.flags: list[Flag] = [Flag("note", n) for n in reference.notes]
        self.environment: dict[str, str] = dict(reference.result.get("environment", {}))
        if reference.degeneracy.degenerate:
            self.flags.append(Flag("degenerate_problem", f"{reference.degeneracy.reason}; outputs are also judged by error relative to the reference's variation"))

    @classmethod
    def early(cls, evaluation: Evaluation, reference: Reference, audit: Check) -> Verdict:
        """A verdict from the source alone (the audit's), with the reference's facts (baselines, environment)."""
        return cls(evaluation.judge, evaluation.problem, evaluation.candidate, reference, audit)

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
            generality=self.generality if status is Status.OK else "",
            **extra,
        )

    def _baselines(self) -> dict[str, Timing]:
        return {name: Timing(**t) for name, t in self.reference.result.get("baselines", {}).items()}

    def judge_outcome(self, outcome: JobOutcome, lap: Callable[[str], None] = lambda name: None) -> EvalResult:
        """The verdict on a finished candidate run."""
        try:
            return self._judge(outcome, lap)
        finally:
            shutil.rmtree(outcome.workdir, ignore_errors=True)

    def _judge(self, outcome: JobOutcome, lap: Callable[[str], None]) -> EvalResult:
        tail = outcome.log_tail
        channel = self._channel_integrity(outcome)
        report = None
        if outcome.result is not None:
            report, malformed = read_report(outcome.result, outcome.calls, outcome.timing)
            if report is None:
                channel = Check("channel_integrity", False, malformed)
        if channel.passed is False:
            self.checks.append(channel)
            return self.result(Status.BANNED, f"channel_integrity: {channel.detail}", log_tail=tail)
        if report is not None:
            self._record_sandbox(report)
        if outcome.output_dropped:
            self.flags.append(Flag("output_dropped", f"the candidate printed {outcome.output_dropped / 1e6:.1f} MB more than its log keeps: "
                                                     "the middle was dropped, the tail is kept"))
        early = self._early_exit(outcome, report)
        if early is not None:
            return early
        self.checks.append(channel)
        checks = CandidateChecks(self, report, outcome)
        status, reason = checks.run()
        lap("checks")
        if self.judge.compare_device == "cuda":  # hand the comparison's device memory back before the next worker
            torch.cuda.empty_cache()
        timing = Timing(**report.timing.model_dump()) if report.timing is not None else None
        speedups = {}
        if timing is not None and timing.median_ms > 0:
            speedups = {name: round(b.median_ms / timing.median_ms, 4) for name, b in self._baselines().items()}
        if status is Status.OK and (flag := host_bound_flag(report)) is not None:
            self.flags.append(flag)
        if status is Status.OK and timing is None:
            self.flags.append(Flag("timing_skipped", "timing skipped: --device cpu runs Triton's interpreter, whose speed means nothing"))
        return self.result(
            status,
            reason,
            timing=timing if status is Status.OK else None,
            speedups=speedups if status is Status.OK else {},
            kernels_launched=dict(report.kernels),
            log_tail="" if status is Status.OK else tail,
            phase_s=dict(report.phase_s),
            physical_floor_ms=checks.floor_ms,
        )

    def _channel_integrity(self, outcome: JobOutcome) -> Check:
        problems = list(outcome.tampering)
        if outcome.result_error:
            problems.append(outcome.result_error)
        if problems:
            return Check("channel_integrity", False, "; ".join(problems))
        return Check("channel_integrity", True, "the worker kept to the judge's protocol")

    def _record_sandbox(self, report: WorkerReport) -> None:
        """What the candidate's process could reach, in the verdict's environment; a flag and a warning if less
        than full isolation."""
        info = report.isolation if isinstance(report.isolation, IsolationClaim) else IsolationClaim()
        if info.isolation:
            self.environment["isolation"] = info.isolation
        if info.missing:
            text = "; ".join(info.missing)
            self.environment["isolation_missing"] = text
            self.flags.append(Flag("isolation_incomplete", f"the candidate ran with less isolation than egg asks for: {text}"))
            self.judge.warn(f"candidate isolation incomplete: {text}")
        if report.output_transport:
            self.environment["output_transport"] = report.output_transport

    def _early_exit(self, outcome: JobOutcome, report: WorkerReport | None) -> EvalResult | None:
        """A verdict when the run did not get to the checks: a timeout, a crash, or an error it reported."""
        tail = outcome.log_tail
        if outcome.timed_out == "memory":
            return self.result(Status.RUNTIME_ERROR, f"over the memory limit of {outcome.memory_limit_bytes / 2**30:.3g} GB: the job's "
                               f"processes held {outcome.peak_rss_bytes / 2**30:.3g} GB when the judge ended it (phase {outcome.phase or 'start-up'})",
                               log_tail=tail)
        if outcome.timed_out:
            limit = self.options.compile_timeout_s if outcome.timed_out == "compile" else self.options.run_timeout_s
            return self.result(Status.TIMEOUT, f"{outcome.timed_out} phase ({outcome.phase or 'start-up'}) exceeded {limit:g} s; the process group was killed", log_tail=tail)
        if report is None:
            in_compile = outcome.phase in ("", "setup", "isolation", "cuda_init", "wait_start", "import", "construct", "wait_inputs")
            status = Status.COMPILE_ERROR if in_compile else Status.RUNTIME_ERROR
            return self.result(status, _exit_story(outcome), log_tail=tail)
        failure = report.failure
        if failure is not None:
            for call in report.calls:
                self.checks.append(Check(f"call_{call.name}", True, f"{call.own_launches} Triton launches"))
            status, message = Status(failure.status), failure.message
            if status is Status.INFRA_ERROR and _after_import(outcome):  # the candidate's code had run: its doing is not the judge's
                status, message = Status.RUNTIME_ERROR, f"{message} (after the candidate's code had run, so counted against it)"
            return self.result(status, message, log_tail=failure.detail[-4000:] or tail, kernels_launched=dict(report.kernels))
        return None


def _exit_story(outcome: JobOutcome) -> str:
    from pipeline.judge.judge import _exit_story as story

    return story(outcome)


def _after_import(outcome: JobOutcome) -> bool:
    from pipeline.judge.channel import PHASES

    return bool(outcome.phase) and PHASES.index(outcome.phase) >= PHASES.index("import")


def host_bound_flag(report: WorkerReport) -> Flag | None:
    """The host took longer to launch one call than the device took to run it: the timed calls had a head start
    (EvalOptions.head_start_ms and _mode), so device time is what was measured, and a real caller would wait for the
    host."""
    if report.timing is None or report.timing_launch is None:
        return None
    device_ms, launch_ms = report.timing.median_ms, report.timing_launch.median_ms
    if launch_ms <= device_ms:
        return None
    capped = report.timing_head_start_capped
    tail = f" ({capped} timed trials outlasted the head start, so their host time is in the device time)" if capped else ""
    return Flag("host_bound", f"launching one call takes the host {launch_ms:.4g} ms, longer than the device's {device_ms:.4g} ms: "
                              "the timing is device time; without CUDA graphs a caller waits for the host" + tail)


class CandidateChecks:
    """Every check on a finished candidate run, in the order that decides its status."""

    def __init__(self, verdict: Verdict, report: WorkerReport, outcome: JobOutcome) -> None:
        self.verdict, self.report, self.outcome = verdict, report, outcome
        self.reference = verdict.reference
        self.comparer = verdict.comparer
        self.draw = verdict.draw
        self.calls = {c.name: c for c in report.calls if not c.refused}
        self.refused = {c.name: c.refused for c in report.calls if c.refused}
        self.floor_ms: float | None = None

    def run(self) -> tuple[Status, str]:
        """Run all checks; the status is the first failure's (banned before mismatch), else ok."""
        ordered = [
            (Status.BANNED, self.judge_integrity),
            (Status.BANNED, self.output_types),
            (Status.BANNED, self.input_mutation),
            (Status.BANNED, self.background_threads),
            (Status.BANNED, self.triton_launched),
            (Status.BANNED, self.torch_delegation),
            (Status.INFRA_ERROR, self.same_inputs),
            (Status.MISMATCH, self.output_structure),
            (Status.MISMATCH, self.fresh_outputs),
            (Status.MISMATCH, self.correctness),
            (Status.MISMATCH, self.module_state),
            (Status.MISMATCH, self.other_shapes),
            (Status.BANNED, self.timing_bracket),
            (Status.BANNED, self.side_stream),
            (Status.BANNED, self.physical_limit),
        ]
        first: tuple[Status, str] | None = None
        for status, check in ordered:
            outcome = check()
            if outcome is None:  # a check this run did not ask for
                continue
            self.verdict.checks.append(outcome)
            if outcome.passed is False and first is None:
                first = (status, f"{outcome.name}: {outcome.detail}")
        return first or (Status.OK, "passed every check")

    def judge_integrity(self) -> Check:
        changed = self.report.tampering
        return Check("judge_integrity", not changed, f"replaced while the candidate ran: {', '.join(changed)}" if changed
                     else "the judge's own code, torch, time and triton untouched")

    def output_types(self) -> Check:
        bad = sorted({t for c in self.calls.values() for t in c.types if t != "torch.Tensor"})
        return Check("output_types", not bad, f"outputs of type {', '.join(bad)} (must be exactly torch.Tensor)" if bad else "plain tensors")

    def input_mutation(self) -> Check:
        bad = {name: c.mutated_inputs for name, c in self.calls.items() if c.mutated_inputs}
        if bad:
            name, idx = next(iter(bad.items()))
            return Check("input_mutation", False, f"call {name} wrote to input(s) {idx}")
        for name, c in self.calls.items():
            if inputs := [part for part in c.spoiled if part.endswith("'s inputs")]:
                return Check("input_mutation", False, f"call {name} changed call {inputs[0]}, which its caller still holds")
        return Check("input_mutation", True, "inputs unchanged by every call, and by every later one")

    def background_threads(self) -> Check:
        leaked = [n for n, c in self.calls.items() if c.threads_after > 0]
        if self.report.threads_after_timing > 0:
            leaked.append("timing")
        if leaked:
            return Check("background_threads", False, f"threads still running after call(s) {', '.join(leaked)}")
        spawned = [n for n, c in self.calls.items() if c.processes_after > 0]
        if spawned:
            most = max(c.processes_after for c in self.calls.values())
            return Check("background_threads", False, f"processes still running after call(s) {', '.join(spawned)} (up to {most})")
        started = [n for n, c in self.calls.items() if c.processes_started > 0 or c.children_cpu_s > 0]
        if started:
            cpu = sum(c.children_cpu_s for c in self.calls.values())
            return Check("background_threads", False, f"call(s) {', '.join(started)} started processes (their CPU time {cpu:.2f} s): "
                                                      "work done there is outside the judge's sight")
        return Check("background_threads", True, "no thread or process outlived a call")

    def triton_launched(self) -> Check:
        idle = [n for n, c in self.calls.items() if c.own_launches < 1]
        if idle:
            seen = self.report.kernels
            what = f"; launches seen: {seen}" if seen else "; no Triton kernel launched at all"
            return Check("triton_launched", False, f"no Triton kernel of the candidate launched in call(s) {', '.join(idle)}{what}")
        timed_calls = self.report.timed_calls
        if timed_calls and self.report.timed_launches < timed_calls:
            return Check("triton_launched", False, f"{self.report.timed_launches} Triton launches in {timed_calls} timed calls")
        per_call = ", ".join(f"{k}×{v}" for k, v in sorted(self.report.kernels.items()))
        return Check("triton_launched", True, f"launched: {per_call}")

    def torch_delegation(self) -> Check:
        sizes = {d["name"]: self._work_factor(d) for d in self.draw.derived}
        return delegation_check(self.reference.result, self.report, sizes)

    def _work_factor(self, shaped: dict[str, Any]) -> float:
        """How many times the problem's work a call on inputs of another shape is: the reference's own work on that
        set, recorded by this check's reference run as it computed the set's outputs. A size scales the work by no
        one factor (a square's two sides, a GEMM's K and N, weights that stay): a set asked again at a size drawn for
        the check, a side of a square image drawn at 30 where its set had 17, was held to 17's work times 30/17, and
        an honest cuDNN convolution beside a Triton epilogue was banned for the rest (CI, session 28). Without that
        record (a reference run before it): the leading size's factor; for a later dimension, the work its set's
        first run recorded scaled by the drawn size (before any record, a candidate that ran the whole softmax in
        torch at every other row length was `general`: red team 16's c02); with neither, infinite: held only to the
        rule that the reference's every op may not run in torch."""
        measured = self.verdict.checked_reference.get("work_at", {}).get(shaped["name"])
        nominal = _work_total(self.reference.result.get("work"))
        if measured is not None and nominal > 0:
            return _work_total(measured) / nominal
        how = shaped["resize"]
        if not how.get("dim"):
            return how["new"] / max(1, how["nominal"])
        base = next((d for d in self.reference.result.get("derived", []) if d["name"] == shaped.get("again", shaped["name"])), None)
        if base is None or "work" not in base or nominal <= 0:
            return math.inf
        return _work_total(base["work"]) / nominal * how["new"] / max(1, base["resize"]["new"])

    def same_inputs(self) -> Check:
        ref_sums = self.verdict.checked_reference.get("checksums", {})
        cand_sums = self.report.checksums
        differ = [n for n, s in cand_sums.items() if not _close_sums(s, ref_sums.get(self.draw.reference_name(n)))]
        return Check("same_inputs", not differ, f"inputs regenerated differently for {', '.join(differ)}" if differ else "reference and candidate saw the same inputs")

    def output_structure(self) -> Check:
        structure = self.verdict.checked_reference.get("structure") or self.reference.result["structure"]
        shaped = self.draw.shaped_names
        for name, call in self.calls.items():
            if self.draw.reference_name(name) in self.comparer.not_owed:
                continue  # a set of another shape the reference refused with this draw: nothing owed there
            expected = structure.get(self.draw.reference_name(name))
            if expected is None:
                return Check("output_structure", False, f"call {name} is not one the judge made")
            if call.kind != expected["kind"]:
                return Check("output_structure", False, f"call {name} returned {call.kind}, the reference returns {expected['kind']}")
            handed = self.comparer.shapes.get(name)
            wanted = [(t["dtype"], t["shape"]) for t in expected["tensors"]]
            if handed is not None and len(handed) != len(wanted):
                return Check("output_structure", False, f"call {name} handed over {len(handed)} tensors, the reference returns {len(wanted)}")
            for i, ((dtype, shape), (ref_dtype, ref_shape)) in enumerate(zip(handed or [], wanted)):
                # extra calls' outputs are subsampled; a wrong shape on inputs of another shape is a wrong answer there
                full = not (name.startswith("repeat_") or name in self.draw.offsets or name in shaped)
                if dtype != ref_dtype or (full and shape != ref_shape):
                    return Check("output_structure", False, f"call {name} output {i}: {shape} {dtype}, reference {ref_shape} {ref_dtype}")
        return Check("output_structure", True, "same type, count, shapes and dtypes as the reference")

    def fresh_outputs(self) -> Check:
        shared = [(name, c.shares_outputs_with) for name, c in self.calls.items() if c.shares_outputs_with]
        if shared:
            name, earlier = shared[0]
            return Check("fresh_outputs", False, f"call {name} handed back memory that call {earlier}'s outputs still hold: a "
                                                 "caller who keeps both answers reads the later one twice")
        for name, c in self.calls.items():
            if outputs := [part for part in c.spoiled if part.endswith("'s outputs")]:
                return Check("fresh_outputs", False, f"call {name} changed call {outputs[0]} (rewrote, emptied or moved them): "
                                                     "a caller who kept that answer reads other values")
        return Check("fresh_outputs", True, "every call's outputs in memory of their own, left as they were by later calls")

    def module_state(self) -> Check | None:
        """What the reference's first call changed of its buffers (a batch norm's running statistics in training),
        the candidate's first call must change alike, under the same names: a user's `model.eval()` afterwards, or
        the next training step, reads them (red team 20's c10 and c19 left them as constructed). None where the
        reference's first call changed none."""
        changed = self.verdict.checked_reference.get("state_after_first") or {}
        if not changed:
            return None
        atol = rtol = compare.tolerance(torch.float32)  # buffers are float32 where a norm keeps them
        mine = self.report.state_after_first
        for name, ref in sorted(changed.items()):
            got = mine.get(name)
            if got is None or got.shape != ref["shape"]:
                return Check("module_state", False, f"the reference's first call updates its buffer {name} {ref['shape']} (running "
                             f"statistics a user's eval() reads later); ModelNew has {'no such buffer' if got is None else f'{name} of shape {got.shape}'}")
            worst = max((abs(a - b) - rtol * abs(b) for a, b in zip(got.values, ref["values"])), default=0.0)
            if not worst <= atol:  # NaN fails too
                return Check("module_state", False, f"after the first call, buffer {name} differs from the reference's (the "
                             f"running statistics a user's eval() reads later): off by up to {worst + atol:.3g}")
        return Check("module_state", True, f"buffers the first call updates ({', '.join(sorted(changed))}) updated as the reference's")

    def correctness(self) -> Check:
        comparer, draw = self.comparer, self.draw
        shaped = draw.shaped_names
        expected = [n for n in self.calls if n not in shaped] + (draw.timed_names if self.report.timing is not None else [])
        missing = [n for n in expected if n not in comparer.results]
        for name in expected:
            if name in comparer.results:
                self.verdict.trials.append(comparer.results[name])
        failed = [t for t in self.verdict.trials if not t.passed]
        if missing:
            why = self.outcome.output_errors.get(missing[0], "the worker handed over none")
            return Check("correctness", False, f"no outputs for call(s) {', '.join(missing)}: {why}")
        if failed:
            mode = next((s.get("mode", "") for s in draw.checked if s["name"] == failed[0].name), "")
            called = {"eval": " (called after model.eval(), as a user's inference runs)",
                      "grad": " (called with gradients on, as a forward outside torch.no_grad() runs)"}.get(mode, "")
            return Check("correctness", False, f"{failed[0].name}: {failed[0].detail}{called}" + (f" (and {len(failed) - 1} more call(s))" if len(failed) > 1 else ""))
        worst = max((t.max_abs_err or 0.0) for t in self.verdict.trials) if self.verdict.trials else 0.0
        return Check("correctness", True, f"{len(self.verdict.trials)} calls match (max abs error {worst:.3g})")

    def other_shapes(self) -> Check:
        """Inputs of other shapes (pipeline.judge.shapes): right on each, or refused cleanly."""
        flaky = {name: c.refused_first for name, c in self.calls.items() if c.refused_first}
        check, generality = shapes.judge_calls(self.draw, self.reference.result, self.comparer.results, self.refused,
                                               frozenset(self.calls), self.comparer.not_owed, flaky)
        self.verdict.generality = generality
        self.verdict.trials.extend(self.comparer.results[s["name"]] for s in self.draw.derived if s["name"] in self.comparer.results)
        return check  # type: ignore[return-value]

    def timing_bracket(self) -> Check:
        """The parent's clock around the timed trials against what the worker's times explain."""
        sums, marks = self.report.timing_sums, self.outcome.marks
        if self.report.timing is None:
            return Check("timing_bracket", None, "no device timing on this device")
        start, end = marks.get("trials_start"), marks.get("trials_end")
        if sums is None or start is None or end is None:
            return Check("timing_bracket", False, "the timed trials were not marked on the judge's channel")
        bracket_ms = (end - start) * 1e3
        per_trial = self.reference.calibration.get("overhead_ms_per_trial", 0.0)
        overhead = per_trial * sums.trials
        explained_ms = sums.event_ms + sums.launch_ms + overhead
        periods = sorted(self.comparer.trial_periods_ms()) if self.comparer is not None else []
        period = f"; median trial period on its clock {periods[len(periods) // 2]:.4g} ms" if periods else ""
        detail = (f"the judge's clock saw {bracket_ms:.4g} ms of trials; the worker's times explain {explained_ms:.4g} ms "
                  f"({sums.event_ms:.4g} ms device, {sums.launch_ms:.4g} ms launching, {per_trial:.3g} ms a trial of the "
                  f"reference's own overhead){period}")
        if bracket_ms > BRACKET_FACTOR * explained_ms + BRACKET_SLACK_MS:
            return Check("timing_bracket", False, "reported times far below what the trials took: " + detail)
        if explained_ms - overhead > FLAG_FACTOR * bracket_ms + BRACKET_SLACK_MS:
            return Check("timing_bracket", False, "reported times longer than the trials took: " + detail)
        if bracket_ms > FLAG_FACTOR * explained_ms + BRACKET_SLACK_MS:
            self.verdict.flags.append(Flag("timing_unexplained", f"the timed trials took longer than their times explain: {detail}"))
        return Check("timing_bracket", True, detail)

    def side_stream(self) -> Check:
        report = self.report
        if report.timing is None or report.timing_wall is None:
            return Check("side_stream", None, "no device timing on this device")
        event, wall = report.timing.median_ms, report.timing_wall.median_ms
        calibration = self.reference.calibration
        # an honest Triton kernel's launch costs the host more than an eager op's: the larger of the two gaps
        gap = max(calibration.get("wall_gap_ms", 0.0), calibration.get("wall_gap_triton_ms", 0.0))
        if report.timing.method == "cuda_graph":  # a graph's replay is a launch of its own: the reference's graph gap
            gap = max(gap, calibration.get("wall_gap_graph_ms", 0.0))
        allowed = event * SIDE_STREAM_RATIO + max(SIDE_STREAM_SLACK_MS, GAP_FACTOR * gap)
        gamed = wall > allowed
        detail = f"event time {event:.4g} ms, time to full-device sync {wall:.4g} ms (allowed {allowed:.4g} ms)"
        return Check("side_stream", not gamed, ("work ran outside the timed stream: " if gamed else "") + detail)

    def physical_limit(self) -> Check:
        if self.report.timing is None:
            return Check("physical_limit", None, "no device timing on this device")
        ref = self.reference.result
        measured = self.report.timing.median_ms
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


# Delegation by work ---------------------------------------------------------------------------------------------


def _work_total(work: dict[str, Any] | None) -> float:
    """A recorded work's nominal seconds, library and other alike."""
    claim = WorkClaim.model_validate(work or {})
    return work_seconds(claim.other_bytes, claim.other_flops) + work_seconds(claim.library_bytes, claim.library_flops)


def delegation_check(reference: dict[str, Any], report: WorkerReport, sizes: dict[str, float] | None = None) -> Check:
    """Whether torch (or the host) still does the job: every compute op outside a Triton kernel, on every call the
    candidate made (checked and timed), as a share of the reference's own work. A library primitive (a GEMM, a
    convolution, pooling, a scan, resampling: probes.LIBRARY_OPS) kept in torch is fine when the problem has other
    work for the candidate's kernels to do (a cuBLAS GEMM with its epilogue fused in Triton); on a problem that is
    nothing but such primitives it is the whole job. `sizes`: a call on inputs of another shape, the factor its
    leading size has over the problem's, when larger (its work is compared with the reference's at that size)."""
    ref = WorkClaim.model_validate(reference.get("work", {}))
    ref_other = work_seconds(ref.other_bytes, ref.other_flops)
    ref_total = max(ref_other + work_seconds(ref.library_bytes, ref.library_flops), reference.get("min_bytes", 0) / NOMINAL_BYTES_PER_S, 1e-12)
    library_allowed = ref_other > 0.0
    calls = [(c.name, c.work) for c in report.calls]
    if report.timed_work.calls:
        calls.append(("timed", report.timed_work))
    ref_ops = set(reference.get("ops", []))
    worst: tuple[float, str, str] = (0.0, "", "")
    used: set[str] = set()
    library: set[str] = set()
    ref_kinds = {kind: work_seconds(*done) for kind, done in ref.library.items()}
    for name, work in calls:
        per = max(work.calls, 1) if name == "timed" else max(1.0, (sizes or {}).get(name, 1.0))
        beyond, foreign = _library_beyond(work, ref_kinds, per)
        other_share = (work_seconds(work.other_bytes, work.other_flops) / per + beyond) / (ref_other if ref_other > 0 else ref_total)
        lib_share = 0.0 if library_allowed else work_seconds(work.library_bytes, work.library_flops) / per / ref_total
        ops = set(work.ops)
        used |= ops
        library |= (ops & LIBRARY_OPS) - foreign
        if ref_ops and ref_ops <= ops:
            return Check("torch_delegation", False, f"every compute op of the reference still runs in torch ({', '.join(sorted(ref_ops))}), in call {name}: the kernels do not do the job")
        host_share = work.to_host_bytes / per / max(reference.get("min_bytes", 1), 1)
        kinds = (
            (other_share, f"torch computes {{share}} of the reference's {'non-library ' if ref_other > 0 else ''}work outside Triton kernels in call {name} ({{ops}})"),
            (lib_share, f"library primitives ({{library}}) do {{share}} of the reference's work in call {name}, and the problem has nothing else to do"),
            (host_share, f"{{share}} of the problem's bytes go to the host as numpy or Python data in call {name}"),
        )
        for share, text in kinds:
            if share > worst[0]:
                worst = (share, text, name)
    share, text, name = worst
    if share > NEGLIGIBLE_WORK:
        story = text.format(share=f"{share:.0%}", ops=", ".join(sorted(used - library)) or "none", library=", ".join(sorted(library)))
        return Check("torch_delegation", False, f"{story}: the kernels do not do the job")
    kept = f"; library kept: {', '.join(sorted(library))}" if library else ""
    if not used:
        return Check("torch_delegation", True, "no torch compute op used")
    return Check("torch_delegation", True, f"torch compute ops still used: {', '.join(sorted(used))} (at most {share:.1%} of the reference's work){kept}")


def _library_beyond(work: WorkClaim, ref_kinds: dict[str, float], per: float) -> tuple[float, set[str]]:
    """Library work a call does past what the reference gives each kind (nominal seconds per call), and the ops of
    kinds the reference never calls: both are the candidate's torch compute, not library work it may keep."""
    beyond, foreign = 0.0, set()
    for kind, done in work.library.items():
        allowed = ref_kinds.get(kind, 0.0) * LIBRARY_MARGIN
        beyond += max(0.0, work_seconds(*done) / per - allowed)
        if kind not in ref_kinds:
            foreign |= {op for op in work.ops if op in LIBRARY_OPS and library_family(op) == kind}
    return beyond, foreign


def _close_sums(a: list, b: list | None) -> bool:
    if b is None or len(a) != len(b):
        return False
    return all(x == y or (x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(y))) for x, y in zip(a, b))


def _peak_flops(gpu: str, dtypes: frozenset[str]) -> float | None:
    for name, peaks in PEAK_FLOPS.items():
        if name in gpu:
            return peaks["half"] if dtypes & {"float16", "bfloat16"} else peaks["float32"]
    return None
