"""`evaluate(problem, candidate, options) -> EvalResult`: the strict verdict on one candidate.

The reference runs in one fresh worker, the candidate in another; the candidate never sees the reference outputs,
and every comparison and verdict is made here, in a process no candidate code has run in.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from pipeline.judge import compare
from pipeline.judge.audit import audit_source
from pipeline.judge.sandbox import InfraError, JobOutcome, WorkerPool
from pipeline.judge.tensorfile import load_outputs
from pipeline.types import Candidate, Check, EvalOptions, EvalResult, Finding, Flag, Problem, Status, Timing, TrialResult

# Reads a candidate's source and returns the cheat patterns in it (pipeline.judge.audit.audit_source).
Auditor = Callable[..., tuple[Finding, ...]]
REFERENCE_TIMEOUT_S = 1800.0

# Timing is flagged as gamed when the host-side time to a full-device sync exceeds the event time by this much.
# The slack covers the host's own overhead and the tail of the queued L2 flush (256 MB at ~4 TB/s is ~0.07 ms).
SIDE_STREAM_RATIO, SIDE_STREAM_SLACK_MS = 1.25, 0.25
# A candidate faster than this fraction of the physical floor is flagged (noise and cache effects stay below it).
PHYSICAL_LIMIT_MARGIN = 0.9
# Datasheet dense tensor peaks (FLOP/s) by device name; the floor uses the fastest precision that could pass.
PEAK_FLOPS = {"H200": {"float32": 495e12, "half": 989e12}, "H100": {"float32": 495e12, "half": 989e12}}


@dataclass
class Reference:
    """What the reference worker produced for one problem: outputs, structure, costs and baseline timings."""

    result: dict[str, Any]
    outputs: dict[str, list[torch.Tensor]]
    input_sets: list[dict[str, Any]]
    timed_sets: list[dict[str, Any]]
    degeneracy: compare.Degeneracy
    notes: list[str] = field(default_factory=list)

    @property
    def dtypes(self) -> frozenset[str]:
        return frozenset(t["dtype"] for s in self.result["structure"].values() for t in s["tensors"])


class ReferenceError(Exception):
    """The problem itself could not be run: never blamed on a candidate."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def _seeds(seed: int, count: int, salt: str) -> list[int]:
    rng = random.Random(f"egg:{salt}:{seed}")
    return [rng.randrange(1, 2**31 - 1) for _ in range(count)]


class Judge:
    """Evaluates candidates on one device, caching each problem's reference run. Use as a context manager."""

    def __init__(self, options: EvalOptions, pool: WorkerPool | None = None, auditor: Auditor = audit_source) -> None:
        self.options = options
        self.pool = pool or WorkerPool(options.device)
        self.auditor = auditor
        self._references: dict[str, Reference] = {}

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
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
        """Run (once per problem) the reference on every input set and time the baselines."""
        if problem.fingerprint not in self._references:
            self._references[problem.fingerprint] = self._run_reference(problem)
        return self._references[problem.fingerprint]

    def _input_sets(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        opts = self.options
        seeds = _seeds(opts.seed, opts.correctness_trials + 1, "trials")
        sets = [{"name": f"trial_{i + 1}", "seed": s} for i, s in enumerate(seeds[:-1])]
        if opts.signed_trial:
            sets.append({"name": "signed", "seed": seeds[-1], "signed": True})
        timed_count = opts.timed_input_sets if self.timing_enabled else 0
        timed = [{"name": f"timed_{k}", "seed": s} for k, s in enumerate(_seeds(opts.seed, timed_count, "timed"))]
        return sets, timed

    def _run_reference(self, problem: Problem) -> Reference:
        input_sets, timed_sets = self._input_sets()
        spec = {
            "kind": "reference",
            "problem_path": problem.path,
            "options": _worker_options(self.options),
            "input_sets": input_sets,
            "timed_sets": timed_sets,
        }
        workdir = self.pool.new_workdir("reference")
        outcome = self.pool.run(spec, workdir, compile_timeout_s=REFERENCE_TIMEOUT_S, run_timeout_s=REFERENCE_TIMEOUT_S)
        if outcome.result is None or "failure" in outcome.result:
            why = outcome.result["failure"]["message"] if outcome.result else _exit_story(outcome)
            raise ReferenceError(f"the reference problem failed to run: {why}", outcome.log_tail)
        outputs = load_outputs(workdir)
        shutil.rmtree(workdir, ignore_errors=True)  # candidates must not find the reference outputs on disk
        reference = Reference(outcome.result, outputs, input_sets, timed_sets, compare.Degeneracy(False))
        self._drop_unusable_signed_trial(reference)
        trial_outputs = [outputs[s["name"]] for s in input_sets if not s.get("signed")]
        reference.degeneracy = compare.detect_degenerate(trial_outputs, device=self.compare_device)
        return reference

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
            reference = self.reference(problem)
            verdict = Verdict(self, problem, candidate, reference).run()
        except ReferenceError as exc:
            verdict = dataclasses.replace(base, reason=str(exc), log_tail=exc.log_tail)
        except InfraError as exc:
            verdict = dataclasses.replace(base, reason=f"sandbox failure: {exc}")
        return dataclasses.replace(verdict, duration_s=round(time.monotonic() - start, 3))


def evaluate(problem: Problem, candidate: Candidate, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate against one problem (a fresh worker pool for this call alone)."""
    with Judge(options or EvalOptions()) as judge:
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


class Verdict:
    """Builds one candidate's EvalResult: static audit, the sandboxed run, then every check in order."""

    def __init__(self, judge: Judge, problem: Problem, candidate: Candidate, reference: Reference) -> None:
        self.judge, self.problem, self.candidate, self.reference = judge, problem, candidate, reference
        self.options = judge.options
        self.checks: list[Check] = []
        self.trials: list[TrialResult] = []
        self.flags: list[Flag] = [Flag("note", n) for n in reference.notes]
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
            environment=dict(self.reference.result.get("environment", {})),
            baselines=self._baselines(),
            **extra,
        )

    def _baselines(self) -> dict[str, Timing]:
        return {name: Timing(**t) for name, t in self.reference.result.get("baselines", {}).items()}

    @property
    def sample(self) -> dict[str, int]:
        """How large outputs of extra calls are subsampled (an offset the candidate cannot know in advance)."""
        # Wholesale wrong outputs (caching, phase switching) still show, without GiBs of copies per candidate.
        limit = self.options.subsample_above
        return {"min_numel": limit, "elements": limit, "offset": _seeds(self.options.seed, 1, self.candidate.fingerprint)[0]}

    def run(self) -> EvalResult:
        source = Path(self.candidate.path).read_text(encoding="utf-8")
        try:
            findings = self.judge.auditor(source, reference_dtypes=self.reference.dtypes)
        except SyntaxError as exc:
            self.checks.append(Check("static_audit", None, "not parsed"))
            return self.result(Status.COMPILE_ERROR, f"syntax error at line {exc.lineno}: {exc.msg}")
        self.checks.append(Check("static_audit", not findings, "; ".join(_finding_text(f) for f in findings) or "no cheat patterns in the source"))
        if findings:
            return self.result(Status.BANNED, _finding_text(findings[0]) + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""))
        outcome = self._run_candidate()
        early = self._early_exit(outcome)
        if early is not None:
            return early
        return self._judge_run(outcome)

    def _run_candidate(self) -> JobOutcome:
        ref = self.reference
        first = ref.result["structure"][ref.input_sets[0]["name"]]["tensors"]
        spec = {
            "kind": "candidate",
            "problem_path": self.problem.path,
            "candidate_path": self.candidate.path,
            "options": _worker_options(self.options),
            "input_sets": ref.input_sets,
            "timed_sets": ref.timed_sets,
            "poison": [[t["shape"], t["dtype"]] for t in first],
            "sample": self.sample,
        }
        pool = self.judge.pool
        return pool.run(spec, pool.new_workdir("candidate"), compile_timeout_s=self.options.compile_timeout_s, run_timeout_s=self.options.run_timeout_s)

    def _early_exit(self, outcome: JobOutcome) -> EvalResult | None:
        """A verdict when the run did not get to the checks: a timeout, a crash, or an error it reported."""
        tail = outcome.log_tail
        if outcome.timed_out:
            limit = self.options.compile_timeout_s if outcome.timed_out == "compile" else self.options.run_timeout_s
            return self.result(Status.TIMEOUT, f"{outcome.timed_out} phase ({outcome.phase or 'start-up'}) exceeded {limit:g} s; the process group was killed", log_tail=tail)
        if outcome.result is None:
            in_compile = outcome.phase in ("", "setup", "import", "construct")
            status = Status.COMPILE_ERROR if in_compile else Status.RUNTIME_ERROR
            return self.result(status, _exit_story(outcome), log_tail=tail)
        failure = outcome.result.get("failure")
        if failure:
            self._observe_calls(outcome.result)
            return self.result(Status(failure["status"]), failure["message"], log_tail=(failure.get("detail") or "")[-4000:] or tail, kernels_launched=outcome.result.get("kernels", {}))
        return None

    def _judge_run(self, outcome: JobOutcome) -> EvalResult:
        result = outcome.result
        outputs = load_outputs(outcome.workdir)
        shutil.rmtree(outcome.workdir, ignore_errors=True)
        checks = CandidateChecks(self, result, outputs)
        status, reason = checks.run()
        del outputs
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
