"""The code that runs inside one sandboxed child process: one job (reference or candidate), then exit.

Imports: torch, triton, numpy and the standard library only (and egg modules that keep to the same rule), so it
starts fast and runs on the GPU machine's image as is.

The child talks to the judge over the job's channel only (pipeline.judge.channel): it reports each phase as it
enters it (the judge's own clock applies the timeouts), hands over each kept call's outputs as it returns
(pipeline.judge.tensorfile), asks for a call's subsample offset only once the call has returned, and marks the
start and end of its timed trials. At the end it writes `result.json`, facts the judge treats as claims. A
candidate job imports the candidate only once the judge says the static audit passed (`start`), learns the
inputs of its checked calls only once it is constructed (`inputs`) and those of its timed calls only once its
checked calls are done (`go`): no candidate code can know an input before it is called with it. Verdicts are made
by the parent: this process only observes, since a candidate can change anything in it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import random
import re
import secrets
import signal
import sys
import threading
import time
import traceback
from typing import Any

import torch

from pipeline.judge import channel, resize, timing
from pipeline.judge.compare import DegeneracyWatch, subsample
from pipeline.judge.probes import (
    HostProbe,
    WatchGuards,
    LaunchCounter,
    NamespaceSnapshot,
    Work,
    WorkRecorder,
    blind_judge_modules,
    hold_fp32_to_fp32,
    interpreter_autotune,
    live_threads,
    warm_up,
)
from pipeline.judge.tensorfile import OutputSink

class JobFailure(Exception):
    """Ends a job with a status (compile_error, runtime_error, banned, infra_error) and a message."""

    def __init__(self, status: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


class Job:
    """One job's spec, working folder and channel to the judge."""

    def __init__(self, spec_path: str) -> None:
        with open(spec_path) as f:
            self.spec: dict[str, Any] = json.load(f)
        self.options: dict[str, Any] = self.spec["options"]
        self.device = torch.device(self.options["device"])
        self.dir = os.path.dirname(os.path.abspath(spec_path))
        self.phase_starts: list[tuple[str, float]] = []
        self.channel: channel.Connection | None = None

    def connect(self) -> None:
        """Open the judge's channel, if it offers one (a job run without a judge has none)."""
        try:
            self.channel = channel.connect(self.dir)
        except OSError as exc:
            print(f"[egg worker] no channel to the judge: {exc}", flush=True)
            self.channel = None

    def receive(self, kind: str, before: str) -> dict[str, Any]:
        """The judge's next message, which must be of type `kind` (descriptors sent with it are closed)."""
        if self.channel is None:
            raise JobFailure("infra_error", f"no channel to the judge for {before}")
        try:
            message, fds = self.channel.receive()
        except channel.ChannelClosed as exc:
            raise JobFailure("infra_error", f"the judge closed the channel before {before}: {exc}")
        for fd in fds:
            os.close(fd)
        if message.get("type") != kind:
            raise JobFailure("infra_error", f"expected {kind}, got a {message.get('type')!r} message")
        return message

    def wait_for(self, kind: str, before: str) -> dict[str, Any]:
        """Tell the judge we wait for its `kind` message (the wait is on the judge's clock, not ours), and take it."""
        self.phase(f"wait_{kind}")
        return self.receive(kind, before)

    def send(self, message: dict[str, Any]) -> None:
        if self.channel is not None:
            try:
                self.channel.send(message)
            except channel.ChannelClosed as exc:
                raise JobFailure("infra_error", f"the judge closed the channel: {exc}")

    def sample(self, call: str) -> dict[str, int] | None:
        """The subsample of `call`'s outputs the judge compares, asked for once the call has returned (None: the
        judge does not compare this one)."""
        self.send({"type": "sample", "call": call})
        message = self.receive("sample", f"the sample of call {call}")
        if not message.get("keep", True):
            return None
        return {k: int(message[k]) for k in ("min_numel", "elements", "offset")}

    def outputs(self) -> OutputSink:
        return OutputSink(self.dir, self.channel, self.device)

    def phase(self, name: str) -> None:
        self.phase_starts.append((name, time.monotonic()))
        print(f"[egg worker] phase: {name}", flush=True)
        self.send({"type": "phase", "name": name})

    def mark(self, name: str) -> None:
        self.send({"type": "clock", "mark": name})

    def phase_seconds(self) -> dict[str, float]:
        """How long each phase took (the last one runs to now)."""
        ends = [t for _, t in self.phase_starts[1:]] + [time.monotonic()]
        seconds: dict[str, float] = {}
        for (name, start), end in zip(self.phase_starts, ends):
            seconds[name] = seconds.get(name, 0.0) + end - start
        return {name: round(s, 4) for name, s in seconds.items()}

    def write_result(self, result: dict[str, Any]) -> None:
        tmp = os.path.join(self.dir, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, os.path.join(self.dir, "result.json"))

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def prepare(job: Job, trusted_cache: str | None = None) -> None:
    """Runs as the job enters its sandbox, before its root changes and its privileges drop: on a GPU, initialize
    CUDA and Triton's driver, and compile the judge's own kernels into a cache only egg can write (a job may write
    the compile cache it later runs from, never the one the judge's kernels come from)."""
    if job.device.type != "cuda":
        return
    job.phase("cuda_init")
    torch.ones(1, device=job.device)
    if trusted_cache:  # root still, before the jail: the plan's environment (the job's own caches) replaces it after
        os.environ["TRITON_CACHE_DIR"] = trusted_cache
    timing.warm_triton()  # what Triton starts once a process runs now, not in a call or a timed trial


def run_job(spec_path: str, isolation: dict[str, Any] | None = None, job: Job | None = None) -> int:
    """Run one job and write its result. Returns the process exit code (0 when a result was written)."""
    job = job or Job(spec_path)
    if job.channel is None:
        job.connect()
    result: dict[str, Any] = {"kind": job.spec["kind"], "isolation": isolation or {}}
    try:
        job.phase("setup")
        hold_fp32_to_fp32()
        if job.spec["kind"] == "reference":
            try:
                ReferenceRun(job, result).run()
            except JobFailure:
                raise
            except Exception as exc:  # the problem's own code failed: reported, never blamed on a candidate
                raise JobFailure("infra_error", _reference_failure(exc), traceback.format_exc())
        else:
            CandidateRun(job, result).run()
        job.phase("done")
    except JobFailure as failure:
        result["failure"] = {"status": failure.status, "message": failure.message, "detail": failure.detail}
    except torch.OutOfMemoryError:  # outside the candidate's calls: the problem does not fit as judged
        result["failure"] = {"status": "infra_error", "message": f"out of GPU memory while the judge's worker prepared a call "
                             f"(phase {job.phase_starts[-1][0] if job.phase_starts else 'start-up'}): the problem does not fit this GPU as judged"
                             f"{device_memory_story()}", "detail": traceback.format_exc()}
    except Exception as exc:  # the worker's own fault: a verdict that says so, not a silent exit
        result["failure"] = {"status": "infra_error", "message": f"the judge's worker failed: {type(exc).__name__}: {exc}",
                             "detail": traceback.format_exc()}
    result["phase_s"] = job.phase_seconds()
    job.write_result(result)
    if job.channel is not None:
        job.channel.close()
    return 0


def device_memory_story() -> str:
    """What this process held of the GPU and what was free when it ran out (' (...)'), or '' if CUDA cannot say."""
    try:
        free, total = torch.cuda.mem_get_info()
        held = torch.cuda.memory_reserved()
    except Exception:
        return ""
    gb = 2**30
    return f" (this worker held {held / gb:.3g} GB; {free / gb:.3g} GB of the GPU's {total / gb:.3g} GB were free)"


def _reference_failure(exc: Exception) -> str:
    if isinstance(exc, torch.OutOfMemoryError):
        return f"the reference ran out of device memory: the problem does not fit this GPU as judged{device_memory_story()} ({exc})"
    return f"the reference raised {type(exc).__name__}: {exc}"


# Inputs -----------------------------------------------------------------------------------------------------------


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton and dataclasses look modules up by name
    spec.loader.exec_module(module)
    return module


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def _copy_in_layout(x: torch.Tensor) -> torch.Tensor:
    """A fresh copy of x with its strides and storage offset (clone() makes a view that is not dense contiguous)."""
    if any(stride == 0 and size > 1 for size, stride in zip(x.shape, x.stride())):
        return x.clone()  # an expanded tensor: elements that share memory cannot be copied into as such
    buffer = torch.empty(x.untyped_storage().nbytes() // max(1, x.element_size()), dtype=x.dtype, device=x.device)
    copy = buffer.as_strided(x.shape, x.stride(), x.storage_offset())
    copy.copy_(x)
    return copy


def make_inputs(get_inputs, input_set: dict[str, Any], device: torch.device) -> list[Any]:
    """The inputs of one named set: `get_inputs()` under the set's seed, then its transform: `signed` draws
    standard normal values instead, `scaled` multiplies by the set's `scale`, `large` by
    2**`exponent`, `outliers` and `ties` as their functions say (floating inputs only).

    Tensors are created on the device itself (torch's default device is set while `get_inputs()` runs): the
    device's generator is seeded too, so every process draws the same values, and a GiB of inputs costs
    milliseconds instead of seconds of CPU time.
    """
    torch.manual_seed(input_set["seed"])
    transform = input_set.get("transform") or ("signed" if input_set.get("signed") else "")
    with device:
        inputs = list(get_inputs())
        if input_set.get("resize"):  # inputs of another shape: the same draws, cut or grown (pipeline.judge.resize)
            inputs = resize.resize(inputs, input_set["resize"], get_inputs)
        if transform == "signed":
            gen = torch.Generator(device=device).manual_seed(input_set["seed"] + 1)
            fresh = lambda v: torch.randn(v.shape, generator=gen, device=device).to(v.dtype)  # noqa: E731
            # in place the same values (randn is normal_ on a new tensor), float32 only: others draw in float32 first
            _replace(inputs, fresh, in_place=lambda v: v.normal_(generator=gen) if v.dtype == torch.float32 else fresh(v))
        elif transform == "scaled":
            _replace(inputs, lambda v: v * input_set["scale"], in_place=lambda v: v.mul_(input_set["scale"]))
        elif transform == "outliers":
            gen = torch.Generator(device=device).manual_seed(input_set["seed"] + 2)
            _replace(inputs, lambda v: _with_outliers(v, gen), in_place=lambda v: _with_outliers(v, gen, in_place=True))
        elif transform == "large":
            power = lambda v: 2.0 ** min(input_set["exponent"], LARGE_CAP.get(v.dtype, input_set["exponent"]))  # noqa: E731
            _replace(inputs, lambda v: v * power(v), in_place=lambda v: v.mul_(power(v)))
        elif transform == "ties":  # equal values everywhere (red team 17's c3 returned the last of tied maxima where torch
            # returns the first, and passed every draw without ties)
            rng = random.Random(input_set["seed"] + 3)
            _replace(inputs, lambda v: _with_ties(v, rng), in_place=lambda v: _with_ties(v, rng, in_place=True))
    inputs = to_device(inputs, device)
    if (input_set.get("resize") or {}).get("layout"):  # after the values: a transform makes contiguous tensors again
        with device:
            inputs = resize.strided(inputs, input_set["resize"]["layout"])
    if device.type == "cuda" and tensor_bytes(inputs) > KEEP_ON_DEVICE_BYTES:
        # what drawing them left in torch's cache goes back to the driver, for the other worker, the judge and the
        # outputs' export (cuMemCreate draws outside this cache); in the candidate's worker this runs before the poison
        torch.cuda.empty_cache()
    return inputs


_INTEGRAL = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")  # outputs where ties show


def _replace(inputs: list[Any], transform, in_place=None) -> None:
    """Transform the floating inputs in order, one at a time, so each original can go before the next is made; with
    `in_place`, an input that only this list holds is changed where it lies (no second copy: the reference computing
    a timed trial's scaled inputs beside the candidate's timed sets ran a 16 GB pooling input out of GPU memory at
    re-verification, bench/results/2026-12-07-s29), while one the problem also keeps is copied, never changed."""
    for k in range(len(inputs)):
        if not _floating(inputs[k]):
            continue
        if in_place is not None and _only_here(inputs, k):
            inputs[k] = in_place(inputs[k])  # the same tensor, changed (or, where it cannot be, a new one)
        else:
            inputs[k] = transform(inputs[k])


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _only_here(inputs: list[Any], k: int) -> bool:
    """Whether `inputs[k]` is held by nothing but the list, and its memory by nothing but it: a tensor `get_inputs()`
    made for this call, not a module's own tensor, a view or a detached alias of one (which a change in place would
    carry into every later draw)."""
    if _USE_COUNT is None or sys.getrefcount(inputs[k]) != 2:  # the list's reference and the call's argument
        return False
    v = inputs[k]
    return (v._base is None and not v.requires_grad and v.is_contiguous()
            and _USE_COUNT(v.untyped_storage()._cdata) == 2)  # v's reference, and the storage object's


def _with_outliers(value: torch.Tensor, gen: torch.Generator, in_place: bool = False) -> torch.Tensor:
    """About 1% of the elements replaced by values of magnitude 50 to 1000, each with the sign of the element it
    replaces. (Random signs made sums of outliers that cancel to near zero, where the fp32 reference itself is
    further than 1e-4 from the exact value: a correct kernel failed there. The signed trial covers signs.)"""
    out = value if in_place else torch.empty(value.shape, dtype=value.dtype, device=value.device)
    source, target = value.reshape(-1), out.view(-1)
    ends = (source[0].clone(), source[-1].clone()) if source.numel() else ()
    # chunk by chunk: its masks and draws were 4 float32 copies of a GiB input at once (a tensor of one chunk or
    # fewer draws exactly the values it drew whole)
    for i in range(0, source.numel(), CHUNK):
        v = source[i : i + CHUNK]
        picked = torch.rand(v.shape, generator=gen, device=v.device) < OUTLIER_SHARE
        size = 50 + 950 * torch.rand(v.shape, generator=gen, device=v.device)
        sign = torch.where(v < 0, -1.0, 1.0)
        target[i : i + CHUNK] = torch.where(picked, (size * sign).to(v.dtype), v)
    if ends:  # the first and last elements as drawn: a key on them meets inputs that differ only inside
        target[0], target[-1] = ends
    return out


OUTLIER_SHARE = 0.01
LARGE_CAP = {torch.float16: 12}  # the large trial's largest power of two by dtype (float16 ends at 65504)
TIES_STEPS = (1, 2, 3, 4, 8)  # the ties trial's grid: 1/step of the problem's draws, drawn per set


def _with_ties(value: torch.Tensor, rng: random.Random, in_place: bool = False) -> torch.Tensor:
    """The problem's draws on a grid drawn for this set (a step of 1/1 to 1/8, then scaled by 0.5-2 and shifted by -2
    to 1, so tied values are no fixed multiples and take either sign), and along every dimension of two or more a
    slice set to one negative constant, and where it has four or more another set to one positive constant. The
    negative slices are written last and share their value, so each is whole: whatever dimension a kernel reduces
    over, where another has a slice, the lines it reduces there are all equal and negative; a line of a positive slice
    holds the positive constant everywhere but where a negative slice crosses it, so its maximum is tied. Red team 18
    passed the first ties trial (a fixed grid of quarters on [0, 1)) with ties broken wrong only off the grid, only for
    negative maxima, only on all-equal slices; with one constant of a drawn sign per dimension, written in turn (a
    later slice cut an earlier one), the negative tie was met in about six checks of seven (CI, session 28). In place
    after one copy: argmax inputs reach 8 GB in KernelBench."""
    step = rng.choice(TIES_STEPS)
    out = (value.mul_(step) if in_place else value.mul(step)).round_().div_(step).mul_(rng.uniform(0.5, 2.0)).add_(rng.uniform(-2.0, 1.0))
    high, low = round(rng.uniform(0.1, 3.0), 1), -round(rng.uniform(0.1, 3.0), 1)
    negative = []
    for d in range(out.dim()):
        if out.shape[d] < 2:
            continue
        places = rng.sample(range(out.shape[d]), 2 if out.shape[d] >= 4 else 1)
        if len(places) == 2:
            out.select(d, places[1]).fill_(high)
        negative.append((d, places[0]))
    for d, place in negative:
        out.select(d, place).fill_(low)
    return out
DERIVE_MIN_S, DERIVE_FACTOR = 20.0, 4.0  # the reference's probing of other shapes: at least this, or 4x its own sets


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


CHUNK = 1 << 26  # elements a worker reads at a time when it checks an input (GiB inputs need no copy of themselves)


def checksum(inputs: list[Any]) -> list[float | None]:
    """A number per input, so the parent can tell that reference and candidate saw the same inputs (summed in float64,
    chunk by chunk)."""
    return [_sum64(v) if isinstance(v, torch.Tensor) else None for v in inputs]


def _sum64(v: torch.Tensor) -> float:
    flat = v.detach().reshape(-1)
    return float(sum(torch.sum(flat[i : i + CHUNK], dtype=torch.float64) for i in range(0, flat.numel(), CHUNK))) if flat.numel() else 0.0


def _all_finite(t: torch.Tensor) -> bool:
    """Whether every element is finite, chunk by chunk (no mask the size of a GiB output)."""
    flat = t.detach().reshape(-1)
    return all(bool(flat[i : i + CHUNK].isfinite().all()) for i in range(0, flat.numel(), CHUNK))


STATE_ELEMENTS = 1 << 16  # a buffer up to this many elements is compared after the first call (a norm's statistics)


def buffer_state(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """The model's floating buffers of up to STATE_ELEMENTS elements, by name, as plain values (nn.Module's own
    `named_buffers`, not an override): what a call leaves behind that a user reads later (running statistics)."""
    state = {}
    for name, b in torch.nn.Module.named_buffers(model):
        if isinstance(b, torch.Tensor) and b.is_floating_point() and b.numel() <= STATE_ELEMENTS:
            state[name] = {"shape": list(b.shape), "values": [float(v) for v in b.detach().double().reshape(-1).cpu().tolist()]}
    return state


def _same_outputs(a: Any, b: Any) -> bool:
    """Whether two calls' outputs are the same: the same structure, every tensor equal (NaN where NaN)."""
    (kind_a, items_a), (kind_b, items_b) = flatten_output(a), flatten_output(b)
    if kind_a != kind_b or len(items_a) != len(items_b):
        return False
    for x, y in zip(items_a, items_b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x.detach(), y.detach())
                                            and not (x.is_floating_point() and torch.allclose(x.detach(), y.detach(), rtol=0, atol=0, equal_nan=True))):
            return False
    return True


def flatten_output(out: Any) -> tuple[str, list[Any]]:
    """('tensor', [t]) or ('tuple:N', items) or ('list:N', items); anything else is described by its type name."""
    if isinstance(out, torch.Tensor):
        return "tensor", [out]
    if isinstance(out, (tuple, list)):
        return f"{type(out).__name__}:{len(out)}", list(out)
    return f"other:{type(out).__name__}", []


def describe(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "device": t.device.type}


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal content, for telling whether an input was written (chunk by chunk): -0.0 is not 0.0, and a NaN
    equals only the same NaN (values read equal are not enough: a write that keeps them is still a write)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)
    bits = _BITS.get(a.element_size()) if a.dtype.is_floating_point or a.dtype.is_complex else None
    for i in range(0, fa.numel(), CHUNK):
        x, y = fa[i : i + CHUNK].to(fb.device), fb[i : i + CHUNK]  # `a` may be the host's copy of `b`
        if bits is not None and not a.dtype.is_complex:
            x, y = x.contiguous().view(bits), y.contiguous().view(bits)
        if not bool(torch.equal(x, y)):
            return False
    return True


def written(before: list[Any], placed: list, inputs: list[Any]) -> list[int]:
    """The inputs a call changed: their contents (bitwise, against a copy or a keyed fingerprint) or the memory they are."""
    def same(a, b) -> bool:
        return a.same(b) if isinstance(a, _Marked) else same_tensor(a, b)

    return [i for i, (a, b) in enumerate(zip(before, inputs)) if a is not None and (where([b])[0] != placed[i] or not same(a, b))]


class _Marked:
    """An input's keyed fingerprint (`_mark`), standing for its copy where the GPU has no room for one beside the
    others' (a copy on the host, and a whole compare there, took seconds a call for GiB inputs). It lives in the
    candidate's process as a copy would, and a change that keeps it has to know the key."""

    def __init__(self, t: torch.Tensor, key: int) -> None:
        self.key, self.mark = key, _mark(t, key)

    def same(self, t: torch.Tensor) -> bool:
        return _mark(t, self.key) == self.mark


class HeldOutputs:
    """The answers (and the inputs) of the calls before, kept alive through the later calls, newest first, up to
    KEEP_ON_DEVICE_BYTES in all: a caller keeps both `y1 = m(x1)` and `y2 = m(x2)`, and its x1. An answer handed back
    in memory an earlier answer still holds (a ring of reused buffers), or a later call that rewrites, empties or
    moves an earlier answer or an earlier call's inputs, changes what that caller holds. Kept alive, an honest
    kernel's fresh outputs can never land there."""

    def __init__(self) -> None:
        self.calls: list[_HeldCall] = []
        self.key = secrets.randbits(62)  # the fingerprints' weights: a candidate cannot pick changes that keep them
        self.reserve = 0  # device bytes the others of the check may still need (the judge's `reserve`)

    def hold(self, name: str, items: list[Any], inputs: list[Any]) -> None:
        outputs = [t for t in items if type(t) is torch.Tensor]
        given = [v for v in inputs if type(v) is torch.Tensor and not any(v is o for o in outputs)]
        call = _HeldCall(name, outputs, given, self.key)
        if call.nbytes > KEEP_ON_DEVICE_BYTES:  # a caller keeps its last answer whatever its size: held alone if it fits
            if _room_for(call.nbytes, outputs + given, self.reserve):
                self.calls = [call]
            return
        self.calls.insert(0, call)
        total = 0
        for k, held in enumerate(self.calls):
            total += held.nbytes
            if total > KEEP_ON_DEVICE_BYTES:
                del self.calls[k:]
                break

    def release(self) -> None:
        self.calls = []

    def shared_by(self, items: list[Any], inputs: list[Any]) -> str:
        """The held call's name if one of `items` lives in memory one of its outputs holds, else ''. An output that is
        one of this call's inputs (a reference that returns its input, called again on the same tensor) is its
        caller's own memory, not a reused answer."""
        own = [_span(v) for v in inputs if isinstance(v, torch.Tensor)]
        fresh = [_span(t) for t in items if type(t) is torch.Tensor]
        fresh = [f for f in fresh if not any(_overlap(f, o) for o in own)]
        for held in self.calls:
            if any(_overlap(f, h) for f in fresh for h in held.output_spans):
                return held.name
        return ""

    def spoiled(self) -> list[str]:
        """What of the held calls a call just made has changed: `<call>'s outputs` or `<call>'s inputs`."""
        return [f"{held.name}'s {part}" for held in self.calls for part in held.changed()]


class _HeldCall:
    """One earlier call's outputs and inputs, with where each lived and a fingerprint of its bits when it returned."""

    def __init__(self, name: str, outputs: list[torch.Tensor], inputs: list[torch.Tensor], key: int) -> None:
        self.name, self.outputs, self.inputs, self.key = name, outputs, inputs, key
        self.output_spans = [_span(t) for t in outputs]
        self.marks = self.fingerprints()
        self.nbytes = storage_bytes(outputs + inputs)

    def fingerprints(self) -> tuple[list[tuple], list[tuple]]:
        return [_mark(t, self.key) for t in self.outputs], [_mark(t, self.key) for t in self.inputs]

    def changed(self) -> list[str]:
        return [part for part, before, after in zip(("outputs", "inputs"), self.marks, self.fingerprints()) if before != after]


MARK_CHUNK = 1 << 24  # elements fingerprinted at a time (a few int64 temporaries of this size)
_MIX = (-7046029254386353131, -4658895280553007687)  # two odd 64-bit multipliers (wrapping int64 arithmetic)


def _mark(t: torch.Tensor, key: int) -> tuple:
    """Where a tensor lives and a fingerprint of its bits: two wrapping integer sums of its elements' bit patterns,
    each element weighted by a keyed hash of its position, so that swapping, moving or trading off elements changes
    them (an expanded view is read once per distinct element)."""
    flat, first, second = _bits(_distinct(t.detach())).reshape(-1), 0, 0
    for i in range(0, flat.numel(), MARK_CHUNK):
        wide = flat[i : i + MARK_CHUNK].to(torch.int64)
        weight = (torch.arange(i, i + wide.numel(), device=wide.device, dtype=torch.int64) + key) * _MIX[0]
        weight = (weight ^ (weight >> 29)) * _MIX[1]
        first += int((wide * weight).sum())
        second += int((wide * (wide >> 3) * (weight ^ (weight >> 32))).sum())
    return (*where([t]), first, second)


def _distinct(t: torch.Tensor) -> torch.Tensor:
    """`t` with each broadcast (stride 0) dimension cut to one: the elements it holds, each once."""
    for dim in range(t.dim()):
        if t.stride(dim) == 0 and t.size(dim) > 1:
            t = t.narrow(dim, 0, 1)
    return t


def storage_bytes(values: list[torch.Tensor]) -> int:
    """The memory the tensors hold for their caller, each storage once: per storage, the smaller of the extent its
    tensors reach and the bytes of their distinct elements. An expanded view of one element is its 8 bytes; a small
    answer at the start of a GiB storage it never touches, or a few rows strided a GiB apart, is the answer's size
    (counting the whole storage, or the extent alone, let a ring of such answers push every earlier call out of the
    hold); overlapping views count their extent."""
    extents: dict[tuple[str, int], tuple[int, int, int]] = {}
    for v in values:
        device, pointer, _ = _span(v)
        start = v.storage_offset() * v.element_size()
        end = start + (sum((n - 1) * abs(st) for n, st in zip(v.shape, v.stride())) + 1) * v.element_size() if v.numel() else start
        distinct = _distinct(v).numel() * v.element_size()
        low, high, elements = extents.get((device, pointer), (start, end, 0))
        extents[(device, pointer)] = (min(low, start), max(high, end), elements + distinct)
    return sum(min(high - low, elements) for low, high, elements in extents.values())


def _room_for(nbytes: int, values: list[torch.Tensor], reserve: int = 0) -> bool:
    """Whether one call's outputs and inputs of `nbytes` can stay alive through the next call: on a GPU with twice
    that free beside the `reserve` the others of the check may still take; on the host up to 4 GiB."""
    cuda = next((v.device for v in values if v.device.type == "cuda"), None)
    if cuda is None:
        return nbytes <= 4 * KEEP_ON_DEVICE_BYTES
    return device_room(torch.cuda.mem_get_info(cuda)[0], 2 * nbytes, reserve)


def device_room(free: int, wanted: int, reserve: int) -> bool:
    """Whether a worker may take `wanted` more bytes of the GPU for a copy it could keep elsewhere (a held call, the
    mutation check's copy): only where `reserve`, what the reference's worker and the judge may still take, stays free
    after it. Taken while it was free, a 16 GB pooling input's held call and mutation copy (48 GB with its own inputs)
    ran the reference of level1/45's re-verification out of memory on an 80 GB card (bench/results/2026-12-07-s29)."""
    return free - wanted >= reserve


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return t.contiguous().view(torch.uint8) if t.element_size() not in width else t.contiguous().view(width[t.element_size()])
    return t.to(torch.int64) if t.dtype == torch.bool else t


def _span(t: torch.Tensor) -> tuple[str, int, int]:
    storage = t.untyped_storage()
    return str(t.device), storage.data_ptr(), storage.nbytes()


def _overlap(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return a[0] == b[0] and min(a[2], b[2]) > 0 and a[1] < b[1] + b[2] and b[1] < a[1] + a[2]


def where(inputs: list[Any]) -> list[tuple[int, int, tuple[int, ...], tuple[int, ...]] | None]:
    """Where each input tensor lives (its storage, offset, shape, strides): a call that rebinds the caller's tensor
    to other memory (`x.set_(...)`) changed it even if the values read the same."""
    return [(v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.stride()) if isinstance(v, torch.Tensor) else None
            for v in inputs]


KEEP_ON_DEVICE_BYTES = 1 << 30  # input sets up to this size are kept whole on the device between calls


def mutation_copy(inputs: list[Any], output_bytes: int, reserve: int = 0, key: int | None = None) -> list[Any]:
    """A copy of every input tensor, to tell afterwards whether the call wrote one: on the device when it has room
    for the copy and the call's outputs twice over besides the `reserve` (`device_room`), else (GiB inputs on a full
    card) a keyed fingerprint of each where a `key` is given, or a copy on the host."""
    copy_bytes = tensor_bytes(inputs)
    host = False
    if copy_bytes > KEEP_ON_DEVICE_BYTES and any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs):
        host = not device_room(torch.cuda.mem_get_info()[0], copy_bytes + 2 * output_bytes, reserve)
    if host and key is not None:
        return [_Marked(v, key) if isinstance(v, torch.Tensor) else None for v in inputs]
    return [(v.to("cpu", copy=True) if host else v.clone()) if isinstance(v, torch.Tensor) else None for v in inputs]


def model_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def _spec_bytes(spec: dict[str, Any]) -> int:
    """Bytes of a tensor as `describe` recorded it."""
    return math.prod(spec["shape"]) * torch.empty(0, dtype=getattr(torch, spec["dtype"])).element_size()


def tensor_bytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def environment(device: torch.device) -> dict[str, str]:
    import numpy
    import triton

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": numpy.__version__,
        "device": device.type,
        "cudnn_allow_tf32": str(torch.backends.cudnn.allow_tf32),
        "matmul_allow_tf32": str(torch.backends.cuda.matmul.allow_tf32),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            sms=str(props.multi_processor_count),
            cuda=str(torch.version.cuda),
        )
    return env


def keep_subsampled(sink: OutputSink, name: str, items: list[Any], sample: dict[str, int] | None) -> None:
    """Keep a call's plain tensors, subsampled when `sample` says so. type(t) is exact on purpose: a Tensor
    subclass can compute lazily when the checker reads it."""
    sink.keep(name, [subsample(t, sample) for t in items if type(t) is torch.Tensor])


# The reference ----------------------------------------------------------------------------------------------------


class ReferenceRun:
    """Runs the problem's Model on every input set of the judge's draw.

    mode "outputs": hands each set's outputs to the judge, and before each checked set beyond the first `ahead`
    waits for the judge's `next` (it sends one as it lets a reference output go): GiB outputs never pile up in the
    judge. mode "full": keeps no output; records what a verdict needs besides them (the output structure, whether
    the problem is degenerate and which hidden trials it can take, the work it does, its costs, its baselines and
    the calibration of the clocks)."""

    def __init__(self, job: Job, result: dict[str, Any]) -> None:
        self.job, self.result = job, result
        self.outputs = job.outputs()

    def run(self) -> None:
        job, spec = self.job, self.job.spec
        full = spec.get("mode", "full") == "full"
        self.result["environment"] = environment(job.device)
        problem = load_module(spec["problem_path"], "egg_reference")
        torch.manual_seed(job.options["seed"])
        init = problem.get_init_inputs()
        torch.manual_seed(job.options["seed"])
        model = problem.Model(*init).to(job.device)
        wide = bool(spec.get("float64")) and not full  # the float64 referee: the same weights and inputs, widened
        if wide:
            model = model.double()
        job.phase("reference")
        started = time.monotonic()
        self.result["structure"], self.result["checksums"] = {}, {}
        work, degeneracy, unusable = Work(), DegeneracyWatch(), []
        checked, ahead = int(spec.get("checked", len(spec["sets"]))), int(spec.get("ahead", 1 << 30))
        for k, input_set in enumerate(spec["sets"]):
            if not full and ahead <= k < checked:
                job.receive("next", f"the reference's set {input_set['name']}")
            if full and input_set.get("transform") == "ties" and not self._returns_integers():
                # which of equal values wins shows only in integers (indices): elsewhere the set is not worth a call
                self.result.setdefault("hidden_unneeded", []).append(input_set["name"])
                continue
            inputs = make_inputs(problem.get_inputs, input_set, job.device)
            self.result["checksums"][input_set["name"]] = checksum(inputs)
            if wide:
                inputs = [v.double() if isinstance(v, torch.Tensor) and v.dtype == torch.float32 else v for v in inputs]
            recorder = WorkRecorder(work) if full and k == 0 else None
            before = buffer_state(model) if k == 0 and not full and not wide else None
            with torch.no_grad():
                if recorder is not None:
                    with recorder:
                        out = model(*inputs)
                elif input_set.get("resize"):
                    at = Work()  # the reference's own work at this size: what the candidate's torch work there is held to
                    with WorkRecorder(at):
                        out = self.other_shape(model, inputs, input_set["name"])
                    if out is self.REFUSED:
                        continue
                    self.result.setdefault("work_at", {})[input_set["name"]] = at.to_json()
                else:
                    out = model(*inputs)
            job.sync()
            if before is not None:  # what its first call changed of its state (a batch norm's running statistics)
                after = buffer_state(model)
                self.result["state_after_first"] = {n: v for n, v in after.items() if before.get(n) != v}
            if full:
                self.describe(input_set, out, degeneracy, unusable)
            else:
                self.record(input_set, out)
            del out, inputs
        self.result["output_transport"] = self.outputs.transport
        if not full:
            return
        verdict = degeneracy.verdict()
        self.result["degeneracy"] = {"degenerate": verdict.degenerate, "reason": verdict.reason}
        self.result["hidden_unusable"] = unusable
        self.result["work"] = work.to_json()
        first = next(s for s in spec["sets"] if not s.get("transform"))
        self.result["modes"] = self.call_modes(model, make_inputs(problem.get_inputs, first, job.device))
        self.record_costs(model, make_inputs(problem.get_inputs, first, job.device))
        timed = spec.get("timed_sets") or []
        if job.device.type == "cuda" and job.options["timing"] and timed:
            job.phase("baselines")
            self.time_baselines(model, [make_inputs(problem.get_inputs, s, job.device) for s in timed])
        if spec.get("derive"):  # last: a derivation that breaks the device breaks nothing measured before it
            least = float(spec.get("derive_min_s", DERIVE_MIN_S))
            self.derive(model, problem.get_inputs, first, budget_s=max(least, DERIVE_FACTOR * (time.monotonic() - started)))

    REFUSED = object()

    def call_modes(self, model: torch.nn.Module, inputs: list[Any]) -> list[str]:
        """The ways a user calls a model that give the problem's own answers on these inputs, besides the judge's (in
        training mode, gradients off): `eval` (after `model.eval()`) where no module changes with it (no batch norm,
        no dropout that draws), `grad` (gradients on, as a forward outside `torch.no_grad()` runs) where that changes
        nothing. A check calls the candidate so on one set each (red team 20: a kernel wrong only in eval mode, or only
        with gradients on, passed every check). Inputs up to KEEP_ON_DEVICE_BYTES (autograd keeps activations)."""
        if tensor_bytes(inputs) > KEEP_ON_DEVICE_BYTES:
            return []
        modes = []
        try:
            with torch.no_grad():
                base = model(*inputs)
                model.eval()
                try:
                    if _same_outputs(base, model(*inputs)):
                        modes.append("eval")
                finally:
                    model.train()
            with torch.enable_grad():
                if _same_outputs(base, model(*inputs)):
                    modes.append("grad")
        except Exception:  # noqa: BLE001 - a model that cannot be called so is not called so
            return modes
        self.job.sync()
        return modes

    def _returns_integers(self) -> bool:
        """Whether the problem's first trial returned an integer tensor (its structure, recorded before the hidden trials)."""
        first = self.result["structure"].get("trial_1", {})
        return any(t["dtype"] in _INTEGRAL for t in first.get("tensors", []))

    def other_shape(self, model: torch.nn.Module, inputs: list[Any], name: str) -> Any:
        """The reference on a set of another shape: its first run took that shape with one draw, but it may refuse
        another (an index drawn past a cut table). Then that set is not owed: the judge is told (a record of the
        call, as the candidate's refusals are) and checks the candidate without it."""
        try:
            return model(*inputs)
        except Exception as exc:  # noqa: BLE001 - the problem's own code: never the candidate's fault
            if self.job.device.type == "cuda":
                torch.cuda.empty_cache()
            self.job.send({"type": "call", "record": {"name": name, "refused": f"{resize.OTHER_SHAPE_FAILED}: {_reference_failure(exc)}"}})
            return self.REFUSED

    def describe(self, input_set: dict[str, Any], out: Any, degeneracy: DegeneracyWatch, unusable: list[str]) -> None:
        """A set's output structure, and what the facts need of its values (no output leaves this process)."""
        kind, items = flatten_output(out)
        name = input_set["name"]
        tensors = [t for t in items if isinstance(t, torch.Tensor)]
        self.result["structure"][name] = {"kind": kind, "tensors": [describe(t) for t in tensors]}
        if name.startswith("trial_"):
            degeneracy.add(tensors)
        elif input_set.get("transform") and any(t.is_floating_point() and not _all_finite(t) for t in tensors):
            unusable.append(name)


    def record(self, input_set: dict[str, Any], out: Any) -> None:
        kind, items = flatten_output(out)
        name = input_set["name"]
        self.result["structure"][name] = {"kind": kind, "tensors": [describe(t) for t in items if isinstance(t, torch.Tensor)]}
        keep_subsampled(self.outputs, name, items, input_set.get("sample"))

    def record_costs(self, model: torch.nn.Module, inputs: list[Any]) -> None:
        """Compute ops used, FLOPs and the fewest bytes any implementation must move (for the physical limit)."""
        from torch.utils.flop_counter import FlopCounterMode

        flop_counter = FlopCounterMode(display=False)
        with torch.no_grad(), flop_counter:
            out = model(*inputs)
        out_bytes = tensor_bytes(flatten_output(out)[1])
        self.result["ops"] = sorted(self.result["work"]["ops"])
        self.result["flops"] = int(flop_counter.get_total_flops())
        self.result["min_bytes"] = tensor_bytes(inputs) + model_bytes(model) + out_bytes
        self.result["input_bytes"], self.result["weight_bytes"] = tensor_bytes(inputs), model_bytes(model)  # for the judge's limits
        self.result["input_shapes"] = [list(t.shape) for t in inputs if isinstance(t, torch.Tensor)]  # what the verdict names

    def derive(self, model: torch.nn.Module, get_inputs, first: dict[str, Any], budget_s: float) -> None:
        """The inputs of other shapes the reference runs on (pipeline.judge.resize): for each anchor and size, the
        first derivation it runs on with finite outputs, kept with its inputs' shapes and its output structure.
        Probing stops once `budget_s` is spent (a reference slow on other inputs costs the check nothing more)."""
        device, began = self.job.device, time.monotonic()
        deadline = began + budget_s
        nominal = make_inputs(get_inputs, first, device)
        weights = self.result.get("weight_bytes", 0)
        out_bytes = max(0, self.result.get("min_bytes", 0) - self.result.get("input_bytes", 0) - weights)
        plans, derived, done, kept = resize.plans(nominal, out_bytes), [], set(), set()
        first_out = [_spec_bytes(t) for t in self.result["structure"].get(first["name"], {}).get("tensors", [])]
        before = [v.numel() * v.element_size() for v in nominal if isinstance(v, torch.Tensor)] + first_out
        del nominal
        with _Alarm() as alarm:
            for plan in plans:
                key = plan["group"]
                same = (plan["anchor"], plan.get("dim", 0), plan["new"], plan["shared"], plan.get("counts", True), plan.get("tensors", True),
                        str(plan.get("together")), plan.get("layout"))
                if key in done or same in kept:
                    continue
                dim = f"dimension {plan['dim']} of " if plan.get("dim") else ""
                what = f"{plan['size'].replace('_', ' ')} of {dim}tensor input {plan['anchor'] + 1}"
                if time.monotonic() > deadline:
                    self.result["derive_note"] = f"the reference's probing of other shapes stopped after {budget_s:.0f} s, before {what}"
                    break
                name = plan["name"]
                try:
                    alarm.set(deadline - time.monotonic())
                    inputs = make_inputs(get_inputs, {"name": name, "seed": first["seed"], "resize": plan}, device)
                    work = Work()  # the reference's own work at this shape: what a candidate's torch work there is held to
                    with torch.no_grad(), WorkRecorder(work):
                        out = model(*inputs)
                    self.job.sync()
                    alarm.set(0)
                    tensors = [t for t in flatten_output(out)[1] if isinstance(t, torch.Tensor)]
                    if any(t.is_floating_point() and not _all_finite(t) for t in tensors):
                        continue
                except OutOfTime:
                    self.result["derive_note"] = f"the reference ran past the {budget_s:.0f} s its probing of other shapes has, on {what}"
                    break
                except Exception:  # noqa: BLE001 - the reference does not take these inputs: not a shape it owes
                    alarm.set(0)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                done.add(key)
                kept.add(same)
                after = [v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor)]
                plan = {**plan, "most": resize.most_within(plan, before, after + [t.numel() * t.element_size() for t in tensors])} if "most" in plan else plan
                self.result["structure"][name] = {"kind": flatten_output(out)[0], "tensors": [describe(t) for t in tensors]}
                derived.append({"name": name, "resize": plan, "shapes": resize.shapes(inputs), "work": work.to_json()})
                del out, inputs, tensors
        self.result["derived"] = derived
        self.result["derive_s"] = round(time.monotonic() - began, 3)

    def time_baselines(self, model: torch.nn.Module, sets: list[list[Any]]) -> None:
        job, opts = self.job, self.job.options
        buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
        flush = timing.L2Flush(opts["l2_flush_bytes"], job.device)
        self.result["copy_bandwidth_bytes_per_s"] = timing.copy_bandwidth_bytes_per_s(job.device, head_start_ms=opts["head_start_ms"], head_start_mode=opts["head_start_mode"])
        baselines, sums, errors = {}, {}, {}
        runners = {"eager": model}
        if "compile" in opts["baselines"]:
            runners["compile"] = torch.compile(model)
        if "compile_max_autotune" in opts["baselines"]:  # egg bench --max-autotune
            # without CUDA graphs: their static inputs are copied into on every call of a loop that rotates input
            # sets (on the H200 max-autotune read 1.7-2.3x slower than the default mode for that alone)
            runners["compile_max_autotune"] = torch.compile(model, mode="max-autotune-no-cudagraphs")
        for name, fn in runners.items():
            try:
                with torch.no_grad():
                    samples = time_model(fn, buffers, sets, opts, flush, mark=lambda m, n=name: job.mark(f"{m}:{n}"))
                    baselines[name] = timing.summarize(samples.event_ms, samples.method)
                    sums[name] = sample_sums(samples)
                    if opts.get("cuda_graph"):
                        graphed = timing.time_graph(lambda: fn(*buffers), warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
                        baselines[f"{name}_graph"] = timing.summarize(graphed.event_ms, graphed.method)
                        sums[f"{name}_graph"] = sample_sums(graphed)
            except Exception as exc:  # a baseline that cannot run (torch.compile can fail) is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
        self.result["baselines"], self.result["baseline_sums"], self.result["baseline_errors"] = baselines, sums, errors
        try:
            probe = timing.time_triton_launch(job.device, warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
            self.result["triton_launch_gap_ms"] = _median_gap(probe)
        except Exception:  # the check then allows the eager gap alone, as before
            traceback.print_exc()


def process_accounting() -> tuple[int, float]:
    """(processes of this job's namespace alive or not yet reaped, CPU seconds its reaped children used): a
    process a call starts shows in one or the other, however soon it ended."""
    cpu = 0.0
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime
    except (OSError, ValueError, IndexError):
        pass
    if os.getpid() != 2:
        return 0, cpu
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit() and int(name) > 2), cpu
    except OSError:
        return 0, cpu


def other_processes() -> int:
    """Processes of this job's PID namespace other than its init (1) and this worker (2): a process left running
    after a call can go on working outside the judge's clock. 0 when the job has no namespace of its own."""
    if os.getpid() != 2:
        return 0
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit() and int(name) > 2 and _running(name))
    except OSError:
        return 0


def _running(pid: str) -> bool:
    """Not a zombie: a process that has exited but was not reaped does no work."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sample_sums(samples: timing.Samples) -> dict[str, float]:
    """Totals of a timed run's trials: what the parent's clock around them is checked against."""
    return {"event_ms": sum(samples.event_ms), "launch_ms": sum(samples.launch_ms), "wall_ms": sum(samples.wall_ms),
            "trials": len(samples.event_ms), "wall_gap_ms": _median_gap(samples)}


def _median_gap(samples: timing.Samples) -> float:
    gaps = sorted(w - e for w, e in zip(samples.wall_ms, samples.event_ms))
    return gaps[len(gaps) // 2] if gaps else 0.0


def load_set(buffers: list[Any], source: list[Any]) -> None:
    """Copy one input set's contents into the fixed input buffers (same pointers, new values)."""
    for dst, src in zip(buffers, source):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def time_model(fn, buffers, sets, opts, flush, on_output=None, mark=None, prepare_trial=None) -> timing.Samples:
    return timing.time_calls(
        lambda: fn(*buffers),
        lambda i: load_set(buffers, sets[i % len(sets)]),
        warmup=opts["warmup"],
        trials=opts["timing_trials"],
        flush=flush,
        on_output=on_output,
        mark=mark,
        prepare_trial=prepare_trial,
        **timing.timing_args(opts),
    )


# The candidate ----------------------------------------------------------------------------------------------------


def _raised(exc: BaseException) -> str:
    """How a call ended in an exception, naming the job's memory limit when that is what it hit."""
    text = f"raised {type(exc).__name__}: {exc}"
    limit = os.environ.get("EGG_JOB_MEMORY_BYTES")
    if limit and (isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "DefaultCPUAllocator" in str(exc)):
        return f"went over the memory limit of {int(limit) / 2**30:.3g} GB ({text[:300]})"
    return text


class OutOfTime(BaseException):
    """The reference's probing of other shapes ran past its time (raised by the alarm inside the reference's code,
    which no `except Exception` of the problem's can swallow)."""


class _Alarm:
    """SIGALRM raising OutOfTime after `set(seconds)`; a hang in Python code ends there (a hang inside one device
    call still ends at the job's own timeout)."""

    def __enter__(self) -> _Alarm:
        self.usable = threading.current_thread() is threading.main_thread()
        if self.usable:
            self.previous = signal.signal(signal.SIGALRM, self._ring)
        return self

    @staticmethod
    def _ring(signum, frame) -> None:
        raise OutOfTime()

    def set(self, seconds: float) -> None:
        if self.usable:
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001) if seconds else 0.0)

    def __exit__(self, *exc) -> None:
        if self.usable:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, self.previous)


class Refused(Exception):
    """A call on inputs of another shape that the candidate refused cleanly (`text`: its exception, one line)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def is_refusal(exc: BaseException, candidate_path: str = "") -> bool:
    """A plain exception the candidate's code raised, not a fault: not memory, not the device, not a compile, not
    Triton's interpreter (on a GPU the same kernel fails to compile). Raised in the candidate's own file, its
    message is its own ("shared-memory tile allocated for 16 rows" is a guard); raised inside torch, a
    RuntimeError about memory is torch's allocator running out ("DefaultCPUAllocator: not enough memory")."""
    faults = (MemoryError, torch.OutOfMemoryError, getattr(torch, "AcceleratorError", MemoryError))
    if not isinstance(exc, Exception):
        return False
    for e in _chain(exc):  # a fault wrapped in the candidate's own exceptions is still a fault
        if isinstance(e, faults) or is_compile_error(e) or "CUDA error" in str(e) or type(e).__name__ == "InterpreterError":
            return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    own = tb is not None and candidate_path and os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(candidate_path)
    return bool(own) or not (type(exc) is RuntimeError and _TORCH_FAULT.search(str(exc)))


def _chain(exc: BaseException, most: int = 64) -> list[BaseException]:
    """The exception and every one it was raised from or while handling, however deep (`from None` hides a
    context from the traceback, not from here)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < most:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


_TORCH_FAULT = re.compile(r"memory|allocat|device-side|illegal|segmentation", re.I)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."


def is_compile_error(exc: BaseException) -> bool:
    from triton.compiler.errors import CompilationError

    return isinstance(exc, (CompilationError, SyntaxError))


SPAWN_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "os.fork", "os.forkpty")
# gcc's options and the variables that make it (or any program) run another program of the caller's choosing.
_TOOL_OPTIONS = ("-wrapper", "-B", "-specs", "--specs", "-fplugin", "@", "-no-integrated-cpp", "--sysroot", "-iplugindir")
_TOOL_VARIABLES = ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX", "LIBRARY_PATH", "PATH")


def triton_tools() -> frozenset[str]:
    """The paths of the programs Triton's compiles start, as Triton names them and as they resolve: its ptxas
    (bundled, or TRITON_PTXAS_PATH) and the C compiler it builds launchers with (CC, else clang or gcc), read
    before any candidate code."""
    import glob
    import shutil

    import triton

    found = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas*"))
    found += [p for p in (os.environ.get("TRITON_PTXAS_PATH"), os.environ.get("CC"), shutil.which("clang"), shutil.which("gcc"),
                          shutil.which("cc")) if p]
    return frozenset(found) | frozenset(os.path.realpath(p) for p in found)


class ToolWatch:
    """Whether a process other than one of `tools` started while the watch was entered (re-entrant). The audit
    hook sees every process a Python program starts through os or subprocess, and cannot be removed. A tool
    counts only when Triton's own code starts it by a path named in `tools`, with none of the options or
    variables that make it run another program, in the environment it had before any candidate code."""

    def __init__(self, tools: frozenset[str], starter_dir: str | None = None) -> None:
        import triton

        self.tools, self.depth, self.foreign = tools, 0, False
        self.started = 0  # every start the hook saw, but a tool's inside the watch: counted exactly, however short-lived
        self.starter_dir = os.path.abspath(starter_dir or os.path.dirname(triton.__file__)) + os.sep  # Triton's code
        self.environment = {k: os.environ.get(k) for k in _TOOL_VARIABLES}

    @classmethod
    def install(cls, tools: frozenset[str], starter_dir: str | None = None) -> ToolWatch:
        watch = cls(tools, starter_dir)
        sys.addaudithook(watch._event)
        return watch

    def __enter__(self) -> ToolWatch:
        if self.depth == 0:
            self.foreign = False
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1

    def _event(self, event: str, args: tuple) -> None:
        if event in SPAWN_EVENTS and not (self.depth and self._is_tool(event, args)):
            self.started += 1
            if self.depth:
                self.foreign = True

    def _is_tool(self, event: str, args: tuple) -> bool:
        try:
            if event == "subprocess.Popen":
                executable, argv, cwd, env = args
                argv = [argv] if isinstance(argv, (str, bytes)) else list(argv)
                program = executable or argv[0]
            elif event in ("os.posix_spawn", "os.exec"):
                program, argv, env = args
            elif event == "os.spawn":
                _, program, argv, env = args
            else:
                return False  # a fork or a shell: never one of Triton's compiles
            program = os.fsdecode(program)
            if program not in self.tools or not os.path.isabs(program) or os.path.realpath(program) not in self.tools:
                return False
            if any(os.fsdecode(a).startswith(_TOOL_OPTIONS) for a in list(argv)[1:]):
                return False
            environment = os.environ if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in dict(env).items()}
            if any(environment.get(k) != self.environment[k] for k in _TOOL_VARIABLES):
                return False
            return self._started_by_triton()
        except Exception:
            return False

    def _started_by_triton(self) -> bool:
        """Whether the code that asked subprocess for the process is Triton's own (not a candidate's, with a
        preexec_fn of its own)."""
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename == __file__ or os.path.basename(frame.f_code.co_filename) in ("subprocess.py", "os.py")):
            frame = frame.f_back
        return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(self.starter_dir)


def own_children() -> int:
    """Processes whose parent is this one, running or waiting to be reaped (read from /proc)."""
    me, count = str(os.getpid()), 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    count += f.read().rsplit(")", 1)[1].split()[1] == me
            except (OSError, IndexError):
                continue
    return count


def set_aside(original, account, watch: ToolWatch, clear) -> Any:
    """`original`, wrapped: the processes and CPU time of what it starts go to `account.compiler_processes` and
    `account.compiler_cpu_s` (set aside from the candidate's), when `clear()` held before and after and `watch`
    saw nothing start but the tools."""
    def wrapper(*args, **kwargs):
        before = process_accounting()
        was_clear = clear() and before[0] == 0 and not own_children()  # no process of the candidate's to be reaped in here
        with watch:
            try:
                return original(*args, **kwargs)
            finally:
                if was_clear and clear() and not watch.foreign:
                    after = process_accounting()
                    account.compiler_processes += max(0, after[0] - before[0])
                    account.compiler_cpu_s += max(0.0, after[1] - before[1])
    return wrapper


class CandidateRun:
    """Loads ModelNew, calls it on every input set, and records outputs and what the probes saw."""

    def __init__(self, job: Job, result: dict[str, Any]) -> None:
        self.job, self.result = job, result
        self.outputs = job.outputs()
        self.calls: list[dict[str, Any]] = []
        self.held = HeldOutputs()  # the earlier calls' outputs and inputs, alive through the later calls
        self.refused_sets: list[str] = []  # inputs of other shapes it refused, asked for again at the end
        self.launches = LaunchCounter(os.path.abspath(job.spec["candidate_path"]))
        self.host = HostProbe()
        self.guards = WatchGuards()
        self.snapshot: NamespaceSnapshot | None = None
        self.tampering: list[str] = []
        self.records_edited: list[str] = []  # the worker's own evidence found edited (its second counts disagree)
        self.compiler_processes, self.compiler_cpu_s = 0, 0.0  # what Triton's own compiles started (set aside)
        self.watch: ToolWatch | None = None

    def run(self) -> None:
        job = self.job
        self.launches.install()
        self.host.install()
        self.guards.install()
        self.install_compile_accounting()
        if job.device.type != "cuda":
            interpreter_autotune()
        warm_up(job.device)
        if job.device.type == "cuda" and job.options["timing"]:
            timing.prepare_head_start(job.options["head_start_mode"])  # the judge's kernel, before the candidate's code
        get_inputs, get_init_inputs = self.load_problem()
        job.wait_for("start", "the static audit")
        self.snapshot = NamespaceSnapshot(judge=True)  # after our own probes, before any candidate code
        blind_judge_modules()
        self.threads_before = live_threads()
        try:
            model = self.load_candidate(get_init_inputs)
            plan = job.wait_for("inputs", "the inputs")
            job.spec["poison"] = plan["poison"]
            self.held.reserve = int(plan.get("reserve", 0))
            self.result["checksums"] = {}
            self.check_calls(model, get_inputs, plan)
            if job.device.type == "cuda" and job.options["timing"]:
                go = job.wait_for("go", "the timing")  # the device is ours alone from here
                job.phase("timing")
                self.time_candidate(model, get_inputs, go)
        finally:
            self.result["calls"] = self.calls
            self.result["kernels"] = dict(self.launches.counts)
            self.result["tampering"] = self.tampering + (self.snapshot.changes() if self.snapshot else [])
            self.result["output_transport"] = self.outputs.transport

    def verify(self, where: str) -> None:
        """Stop at once if anything of the judge's, torch's or Triton's was replaced, or the launch count edited."""
        changed = self.snapshot.changes() + self.records_edited
        if self.launches.tampered():
            changed.append("the judge's launch counter")
        changed += [f"{name} (switches the judge's watch on torch off)" for name in self.guards.used]
        if changed:
            self.tampering.extend(changed)
            raise JobFailure("banned", f"judge_integrity: replaced during {where}: {', '.join(changed)}")

    def load_problem(self):
        problem = load_module(self.job.spec["problem_path"], "egg_problem")
        # The candidate gets the problem's inputs, never its Model.
        sys.modules.pop("egg_problem", None)
        return problem.get_inputs, problem.get_init_inputs

    def load_candidate(self, get_init_inputs) -> torch.nn.Module:
        job = self.job
        job.phase("import")
        construction = Work()
        self.host.work = construction
        try:
            with WorkRecorder(construction):
                module = load_module(job.spec["candidate_path"], "egg_candidate")
        except Exception as exc:
            raise JobFailure("compile_error", f"importing the candidate failed: {type(exc).__name__}: {exc}", traceback.format_exc())
        model_cls = getattr(module, "ModelNew", None)
        if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
            raise JobFailure("compile_error", "the candidate defines no class ModelNew(nn.Module)")
        job.phase("construct")
        try:
            torch.manual_seed(job.options["seed"])
            init = get_init_inputs()
            torch.manual_seed(job.options["seed"])
            with WorkRecorder(construction):
                model = model_cls(*init).to(job.device)
        except Exception as exc:
            raise JobFailure("compile_error", f"ModelNew(*get_init_inputs()) failed: {type(exc).__name__}: {exc}", traceback.format_exc())
        self.host.work = None
        self.result["construction_work"] = construction.to_json()
        self.verify("the import and construction")
        return model

    def call_or_refuse(self, model, inputs: list[Any], name: str) -> None:
        """A call on inputs of another shape, which the candidate may refuse: a plain exception of its own, that
        left its inputs as they were, raised again when called again with a fresh copy of the same inputs (a guard
        that lets a second call through is no guard; one that tells the judge's retry by the tensors' identity
        meets new ones), with the device still sound after it. The refusal goes to the judge as the call's record;
        anything else (a crash, a compile error, an error the second time only) is judged as any call's. The repeats
        on the problem's own inputs come later: a refusal that left the model in another state fails there."""
        sums = checksum(inputs)
        try:
            self.call(model, inputs, name, sample=False, refusable=True)
            return
        except Refused as first:
            raised = first.text
        again = [_copy_in_layout(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        try:
            self.call(model, again, name, sample=False, refusable=True, refused_first=raised)
        except Refused as refused:
            self.refused_sets.append(name)
            self.refuse(name, sums, refused)

    def ask_again(self, model, get_inputs, sets: list[dict[str, Any]]) -> None:
        """Inputs of other shapes asked for once more at the end, after the repeats (the audit call follows): the sets it
        refused (a guard refuses whenever it is asked: one that answers now is no guard; the judge compares nothing,
        the answer itself fails the check) and the judge's `again` sets, copies of sets it answered earlier (a
        refusal or a call that changed what the model does on later shapes is wrong there)."""
        refused = list(self.refused_sets)
        for input_set in [s for s in sets if s["name"] in refused] + [s for s in sets if s.get("again")]:
            inputs = make_inputs(get_inputs, input_set, self.job.device)
            self.call_or_refuse(model, inputs, input_set["name"] + ("" if input_set.get("again") else channel.ASKED_AGAIN))
            del inputs

    def refuse(self, name: str, sums: list[float | None], refused: Refused) -> None:
        self.verify(f"call {name}")
        record = {"name": name, "kind": "refused", "types": [], "tensors": [], "launches": 0, "own_launches": 0,
                  "mutated_inputs": [], "threads_after": live_threads() - self.threads_before,
                  "processes_after": other_processes(), "processes_started": 0, "children_cpu_s": 0.0,
                  "work": Work().to_json(), "checksum": sums, "refused": refused.text}
        self.calls.append(record)
        self.job.send({"type": "call", "record": record})

    def call(self, model, inputs: list[Any], name: str, *, sample: bool, refusable: bool = False, refused_first: str = "",
             mode: str = "") -> Any:
        """One observed call: poisoned free memory, its torch work, input-mutation check, launches, threads; once
        it has returned and the judge's integrity is verified, its record goes to the judge at once (a later call
        cannot edit it) and its outputs follow (subsampled where the judge says)."""
        sums = checksum(inputs)
        self.result["checksums"][name] = sums
        before, placed = mutation_copy(inputs, self.poison_bytes(), self.held.reserve, self.held.key), where(inputs)
        processes_before = self.candidate_processes()
        starts_before = self.starts()
        self.poison()
        launches_before, own_before = self.launches.total(), self.launches.own_total()
        work = Work()
        recorder = WorkRecorder(work)
        self.host.work = work
        try:
            with torch.enable_grad() if mode == "grad" else torch.no_grad(), recorder:
                out = self.moded_call(model, inputs, mode)
            self.job.sync()
        except Exception as exc:
            if refusable and is_refusal(exc, self.job.spec["candidate_path"]):
                self.job.sync()
                if written(before, placed, inputs):
                    # a refusal leaves the caller's tensors as they were (compared whole with the copy made before)
                    raise JobFailure("banned", f"input_mutation: call {name} wrote to its inputs, then refused them") from None
                if spoiled := self.held.spoiled():
                    raise JobFailure("banned", f"input_mutation: call {name} changed {spoiled[0]}, then refused its own") from None
                self.held.hold(name, [], inputs)  # the caller keeps what it offered: a later call must not touch it
                raise Refused(f"{type(exc).__name__}: {_first_line(str(exc))}") from None
            status = "compile_error" if is_compile_error(exc) else "runtime_error"
            raise JobFailure(status, f"call {name} {_raised(exc)}", traceback.format_exc())
        finally:
            self.host.work = None
        if recorder.tampered():
            self.records_edited.append("the judge's record of the call's torch work")
        self.verify(f"call {name}")
        try:  # the result's own code may run here (a property, a __class__): what fails is the candidate's doing
            kind, items = flatten_output(out)
            types = [f"{type(t).__module__}.{type(t).__qualname__}" for t in items]
            tensors = [describe(t) for t in items if type(t) is torch.Tensor]
        except Exception as exc:
            raise JobFailure("runtime_error", f"the result of call {name} could not be read: {type(exc).__name__}: {exc}", traceback.format_exc())
        processes, cpu_s = self.candidate_processes()
        record = {
            "name": name,
            "kind": kind,
            "types": types,
            "tensors": tensors,
            "launches": self.launches.total() - launches_before,
            "own_launches": self.launches.own_total() - own_before,
            "mutated_inputs": written(before, placed, inputs),
            "threads_after": live_threads() - self.threads_before,
            "processes_after": other_processes(),
            # a process that ended at once can leave no CPU tick and nothing to count: the audit hook saw it start
            "processes_started": max(0, processes - processes_before[0], self.starts() - starts_before),
            "children_cpu_s": round(max(0.0, cpu_s - processes_before[1]), 3),
            "work": work.to_json(),
            "checksum": sums,
            "refused_first": refused_first,
            "shares_outputs_with": self.held.shared_by(items, inputs),
            "spoiled": self.held.spoiled(),
        }
        self.calls.append(record)
        self.job.send({"type": "call", "record": record})
        keep_subsampled(self.outputs, name, items, self.job.sample(name) if sample else None)
        self.held.hold(name, items, inputs)
        return out

    def install_compile_accounting(self) -> None:
        """Triton starts processes of its own while a call first runs a kernel: ptxas when it compiles
        (JITFunction._do_compile) and the C compiler when it builds the kernel's launcher on first use
        (CompiledKernel._init_handles; H200 calls of sessions 10 and 11 flagged them). What processes and CPU time
        those account for is set aside, so only what the candidate started counts: only while no hook of Triton's
        is set that would run the candidate's code inside them, and only when every process started inside was
        one of Triton's tools (an audit hook, which no code can remove, sees each start)."""
        from triton import knobs
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.jit import JITFunction

        run, chain = self, knobs.HookChain  # taken before any candidate code
        watch = self.watch = ToolWatch.install(triton_tools())

        def unset(hook) -> bool:  # a plain None, or one of Triton's own hook chains with nothing in it
            return hook is None or (type(hook) is chain and not hook.calls)

        def hooks_clear() -> bool:  # and no other place of Triton's that would run the candidate's code in a compile
            r = knobs.runtime
            if os.environ.get("TRITON_CACHE_MANAGER") or os.environ.get("TRITON_REMOTE_CACHE_BACKEND"):
                return False
            return all(unset(getattr(r, name, None)) for name in (
                "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook", "kernel_load_start_hook",
                "kernel_load_end_hook")) and all(getattr(owner, name, None) is None for owner, name in (
                    (knobs.build, "impl"), (knobs.cache, "manager_class"), (knobs.cache, "remote_manager_class")))

        JITFunction._do_compile = set_aside(JITFunction._do_compile, run, watch, hooks_clear)
        CompiledKernel._init_handles = set_aside(CompiledKernel._init_handles, run, watch, hooks_clear)

    def starts(self) -> int:
        """Processes the audit hook saw started, Triton's set-aside compiles apart."""
        return self.watch.started if self.watch is not None else 0

    def candidate_processes(self) -> tuple[int, float]:
        """process_accounting() less what Triton's compiles account for."""
        processes, cpu_s = process_accounting()
        return processes - self.compiler_processes, cpu_s - self.compiler_cpu_s

    def moded_call(self, model, inputs: list[Any], mode: str) -> Any:
        """The call as a user in `mode` makes it: `eval`, after `model.eval()` (training mode again after it); `grad`,
        its outputs detached (the caller's gradients on, `call` says)."""
        if mode == "eval":
            model.eval()
            try:
                return self.watched_call(model, inputs)
            finally:
                model.train()
        out = self.watched_call(model, inputs)
        if mode == "grad":
            kind, items = flatten_output(out)
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in items):
                items = [t.detach() if isinstance(t, torch.Tensor) else t for t in items]
                out = items[0] if kind == "tensor" else tuple(items) if isinstance(out, tuple) else list(items)
        return out

    def watched_call(self, model, inputs: list[Any]) -> Any:
        """The candidate's forward, with the guards on torch's switches armed for exactly its duration."""
        self.guards.active = True
        try:
            return model(*inputs)
        finally:
            self.guards.active = False

    def poison_bytes(self) -> int:
        """Bytes of the reference's outputs of one call, as the judge told them (the poison's shapes)."""
        return sum(math.prod(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
                   for shape, dtype in self.job.spec.get("poison", []))

    def poison(self) -> None:
        """Fill memory the allocator will hand out next with NaN, so outputs that are never written show up."""
        for shape, dtype in self.job.spec.get("poison", []):
            dt = getattr(torch, dtype)
            t = torch.empty(shape, dtype=dt, device=self.job.device)
            t.fill_(math.nan if dt.is_floating_point else -1)
            del t

    def check_calls(self, model, get_inputs, plan: dict[str, Any]) -> None:
        job = self.job
        first_inputs = None
        shaped = [s for s in plan["input_sets"] if s.get("resize")]
        for i, input_set in enumerate(s for s in plan["input_sets"] if not s.get("again")):
            inputs = make_inputs(get_inputs, input_set, job.device)
            if i == 0:
                job.phase("first_call")
            if input_set.get("resize"):
                if job.phase_starts[-1][0] != "other_shapes":
                    job.phase("other_shapes")
                self.call_or_refuse(model, inputs, input_set["name"])
            else:
                self.call(model, inputs, input_set["name"], sample=False, mode=input_set.get("mode", ""))
            if i == 0:
                self.result["state_after_first"] = buffer_state(model)
                job.phase("correctness")
                # GiB inputs are not held through the other sets' calls: the repeats draw them again (same seed,
                # same values), so one input set is on the device at a time
                first_inputs = inputs if tensor_bytes(inputs) <= KEEP_ON_DEVICE_BYTES else None
            del inputs
        job.phase("repeats")  # after the other shapes: a call there that changed the model's state fails here
        for k in range(job.options["repeat_calls"]):
            if first_inputs is None:
                first_inputs = make_inputs(get_inputs, plan["input_sets"][0], job.device)
            self.call(model, first_inputs, f"repeat_{k + 1}", sample=True)
        del first_inputs
        if shaped:
            job.phase("asked_again")
            self.ask_again(model, get_inputs, shaped)
        job.phase("audit")  # last: a refusal asked again that changed what the model does meets the problem's shape
        audit = plan["audit_set"]
        self.call(model, make_inputs(get_inputs, audit, job.device), audit["name"], sample=True)
        self.held.release()

    def time_candidate(self, model, get_inputs, go: dict[str, Any]) -> None:
        """The timed trials. Each loads one of the timed sets into the fixed buffers and scales its floating inputs
        by the trial's own factor (so no two trials see the same values); after each, the judge says whether it
        compares that trial's outputs (a few, chosen by it, told only now)."""
        job, opts = self.job, self.job.options
        timed, scales = go["timed_sets"], go["scales"]
        sets = [make_inputs(get_inputs, s, job.device) for s in timed]
        buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
        floating = [v for v in buffers if isinstance(v, torch.Tensor) and v.is_floating_point()]
        flush = timing.L2Flush(opts["l2_flush_bytes"], job.device)
        launches_before = self.launches.total()
        work = Work()
        recorder = WorkRecorder(work)

        def watched(*args):
            work.calls += 1
            self.host.work = work
            try:
                with recorder:
                    return self.watched_call(model, list(args))
            finally:
                self.host.work = None

        def prepare_trial(i: int) -> None:
            load_set(buffers, sets[i % len(sets)])
            for v in floating:
                v.mul_(scales[i])

        def on_output(i: int, out: Any) -> None:
            sample = job.sample(f"timed_{i}")
            if sample is not None:
                self.verify(f"timed trial {i}")
                keep_subsampled(self.outputs, f"timed_{i}", flatten_output(out)[1], sample)

        self.verify("the calls before the timing")
        with torch.no_grad():
            samples = time_model(watched, buffers, sets, opts, flush, on_output, mark=job.mark, prepare_trial=prepare_trial)
        if recorder.tampered():
            self.records_edited.append("the judge's record of the timed calls' torch work")
        self.verify("the timing")
        summary = {
            "timing": timing.summarize(samples.event_ms, samples.method),
            "timing_wall": timing.summarize(samples.wall_ms, "host_to_device_sync"),
            "timing_launch": timing.summarize(samples.launch_ms, "host_launch"),
            "timing_sums": sample_sums(samples),
            "timing_head_start_capped": samples.head_start_capped,
            "timed_launches": self.launches.total() - launches_before,
            "timed_calls": samples.calls,
            "timed_work": work.to_json(),
            "threads_after_timing": live_threads() - self.threads_before,
        }
        if opts.get("cuda_graph"):
            graphed = timing.time_graph(lambda: model(*buffers), warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
            self.verify("the CUDA-graph timing")
            summary["timing_graph"] = timing.summarize(graphed.event_ms, graphed.method)
        self.result.update(summary)
        job.send({"type": "timing", "summary": summary})
