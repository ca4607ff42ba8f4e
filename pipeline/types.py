"""Frozen values that cross module boundaries, each with a JSON round trip.

Only the standard library is imported here: the GPU worker and the orchestrator share these types.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """A verdict. The values are stable: the store and `--json` consumers keep them."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    BANNED = "banned"
    INFRA_ERROR = "infra_error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Problem:
    """A KernelBench-format problem file: `Model`, `get_inputs()`, `get_init_inputs()`."""

    path: str
    name: str  # e.g. "23_Softmax"
    level: int | None  # from a `levelN/` parent folder, if any
    problem_id: int | None  # the leading number of the file name, if any
    fingerprint: str  # sha256 of the source text


@dataclass(frozen=True)
class Candidate:
    """A file defining `ModelNew`, judged against a problem."""

    path: str
    fingerprint: str


HEAD_START_MODES = ("fixed", "until_launched")  # what the GPU runs before each timed call (evaluator.timing.HeadStart)


@dataclass(frozen=True)
class EvalOptions:
    """How a candidate is judged. Defaults follow KernelBench plus egg's hidden checks."""

    device: str = "cuda"  # "cuda" or "cpu" (Triton's interpreter; no timing)
    seed: int = 42  # seed for get_init_inputs() and model construction (KernelBench)
    correctness_trials: int = 5  # trials with fresh seeds and fresh inputs
    signed_trial: bool = True  # one more trial with signed (randn) floating inputs
    scaled_trial: bool = True  # one more with floating inputs scaled by a random factor in [2, 8)
    outlier_trial: bool = True  # one more with about 1% of the floating inputs of magnitude 50 to 1000
    ties_trial: bool = True  # one more with floating inputs on a grid of quarters (many equal values), kept where the
    # reference returns integers (indices: argmax, max with indices, sort): which of equal values wins is part of the answer
    # one more with floating inputs scaled by 2**13 to 2**24 (float16: at most 2**12). Off by default: where an output
    # is a large sum that cancels to near zero, atol does not scale with the values, and an honest GEMM summed in
    # another order than torch's fails there about as often as not (session 28, the split-K seed); open until the
    # trial's tolerance follows its outputs' magnitude
    large_trial: bool = False
    repeat_calls: int = 3  # calls on the same inputs, each output verified
    compile_timeout_s: float = 300.0  # candidate import, construction and first call
    run_timeout_s: float = 600.0  # everything after the first call
    timing: bool = True  # ignored (skipped, and said so) on cpu
    warmup: int = 3
    timing_trials: int = 100
    timed_input_sets: int = 3  # input contents rotated through the timed calls, each verified
    l2_flush_bytes: int = 256 * 1024 * 1024
    warmup_ms: float = 1000.0  # then calls back to back for this long, so the trials start from a loaded GPU's clocks
    head_start_mode: str = "until_launched"  # before each timed call the GPU spins until the host has launched the
    # call ("fixed": for head_start_ms), so host launch latency is not device time (pipeline.judge.timing.HeadStart)
    head_start_ms: float = 2.0  # the longest until_launched spin (a call that waits for the GPU is not deadlocked)
    baselines: tuple[str, ...] = ("eager", "compile")  # timed by the same function as the candidate
    cuda_graph: bool = False  # also time CUDA-graph replay of the candidate and the eager reference
    other_shapes: bool = True  # after a pass, judge the candidate on inputs of other shapes (pipeline.judge.shapes)
    subsample_above: int = 1 << 22  # outputs of extra calls (repeats, audit, timed) larger than this many
    # elements are compared on a strided subsample of about as many elements (the 5 trials and the signed one: whole)

    def __post_init__(self) -> None:
        if self.head_start_mode not in HEAD_START_MODES:
            raise ValueError(f"head_start_mode must be one of {', '.join(HEAD_START_MODES)}, not {self.head_start_mode!r}")
        for name in ("head_start_ms", "warmup_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")


@dataclass(frozen=True)
class Finding:
    """One problem found by reading a candidate's source (static cheat detection)."""

    rule: str  # stable snake_case name, e.g. "timer_patch"
    message: str  # one line a person can act on
    line: int  # 1-based line in the candidate file, 0 if not tied to a line


@dataclass(frozen=True)
class Check:
    """One named check of a verdict. `passed` is None when the check was skipped (detail says why)."""

    name: str
    passed: bool | None
    detail: str = ""


@dataclass(frozen=True)
class TrialResult:
    """One comparison of a candidate output with the reference output."""

    name: str  # e.g. "trial_1", "signed", "repeat_2", "timed_set_0"
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Timing:
    """Device time of one call, over many trials. The CI is for the median (order statistics)."""

    median_ms: float
    mean_ms: float
    std_ms: float
    ci95_low_ms: float
    ci95_high_ms: float
    trials: int
    method: str  # "cuda_events" or "cuda_graph"


@dataclass(frozen=True)
class Flag:
    """Something a person should know about a result that does not change its status."""

    name: str
    message: str


@dataclass(frozen=True)
class EvalResult:
    """The verdict on one candidate, with every check and number behind it."""

    status: Status
    reason: str  # one line: why this status
    problem: Problem
    candidate: Candidate
    device: str
    checks: tuple[Check, ...] = ()
    trials: tuple[TrialResult, ...] = ()
    timing: Timing | None = None
    baselines: dict[str, Timing] = field(default_factory=dict)
    speedups: dict[str, float] = field(default_factory=dict)  # baseline name -> baseline / candidate
    physical_floor_ms: float | None = None  # the fastest any implementation could be (bytes or FLOPs at the ceiling)
    kernels_launched: dict[str, int] = field(default_factory=dict)  # Triton kernel -> launches seen
    flags: tuple[Flag, ...] = ()
    log_tail: str = ""
    duration_s: float = 0.0  # wall time of the whole evaluation, reference run included when not cached
    phase_s: dict[str, float] = field(default_factory=dict)  # the candidate worker's time per phase
    environment: dict[str, str] = field(default_factory=dict)  # versions, GPU, precision switches, `isolation`
    judge_phase_s: dict[str, float] = field(default_factory=dict)  # the judge's seconds per phase (worker_server,
    # reference_lookup, audit, start_job, reference, send_plan, candidate, outputs, checks, total) and the worker's (worker_setup,
    # worker_waited_for_plan, worker_import_construct, worker_calls, worker_timing)
    input_seeds: dict[str, int] = field(default_factory=dict)  # the seed of every input set this check drew (from
    # the operating system's randomness, told to the candidate only call by call): enough to reproduce its inputs
    generality: str = ""  # on inputs of other shapes: "general", "general in the leading size" (other sizes of a later
    # dimension refused), "specialised to the problem's shapes", "not checked" (no derived input the reference runs
    # on), or "" (not judged there: the check was off or the verdict failed)
    reference_source: str = ""  # where the reference's facts came from: memory, disk or computed (its outputs are
    # computed afresh for every check's inputs)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.passed is False)


# JSON round trip --------------------------------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """Turn a value built from these types into plain JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


T = typing.TypeVar("T")


def from_jsonable(cls: type[T], data: Any) -> T:
    """Rebuild a value of type `cls` from what `to_jsonable` produced. Unknown keys are an error."""
    return _decode(cls, data)


def _decode(tp: Any, data: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"{data!r} matches none of {tp}")
    if origin is tuple:
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return tuple(_decode(item, v) for v in data)
    if origin is list:
        return [_decode(typing.get_args(tp)[0], v) for v in data]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        return {_decode(key_tp, k): _decode(val_tp, v) for k, v in data.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = set(data) - names
        if unknown:
            raise KeyError(f"unknown keys for {tp.__name__}: {sorted(unknown)}")
        return tp(**{k: _decode(hints[k], v) for k, v in data.items()})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if isinstance(tp, type) and not isinstance(data, tp):
        raise TypeError(f"expected {tp.__name__}, got {type(data).__name__}")
    return data
