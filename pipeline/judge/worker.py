"""The code that runs inside one sandboxed child process: one job (reference or candidate), then exit.

Imports: torch, triton, numpy and the standard library only (and egg modules that keep to the same rule), so it
starts fast and runs on the GPU machine's image as is.

The child reports through files in its working folder: `phase` (what it is doing now, so the parent can apply the
compile and run timeouts), `result.json` (facts for the verdict) and the outputs it produced (`tensorfile`: on a
GPU, device memory handed to the judge over the job's channel as each call returns; otherwise one raw file per
tensor; `outputs.json` names them). A candidate job waits on the channel for its plan (the input sets, known once
the reference is ready and the static audit has passed) before it imports the candidate. Verdicts are made by the
parent: this process only observes, since a candidate can change anything in it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
from contextlib import nullcontext
from typing import Any

import torch

from pipeline.judge import channel, timing
from pipeline.judge.compare import subsample
from pipeline.judge.probes import LaunchCounter, NamespaceSnapshot, OpRecorder, hold_fp32_to_fp32, live_threads, warm_up
from pipeline.judge.tensorfile import DeviceOutputs, OutputFiles

PLAN_KEYS = ("input_sets", "timed_sets", "poison", "sample")


class JobFailure(Exception):
    """Ends a job with a status (compile_error, runtime_error, banned, infra_error) and a message."""

    def __init__(self, status: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


class Job:
    """One job's spec, working folder and phase file."""

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

    def await_plan(self) -> None:
        """Wait for the judge's plan (input sets, poison, subsample) unless the spec already holds it."""
        if all(key in self.spec for key in PLAN_KEYS):
            return
        if self.channel is None:
            raise JobFailure("infra_error", "the spec holds no plan and the judge offers no channel")
        self.phase("wait_plan")
        message = self._receive("plan", "sending the plan")
        self.spec.update({key: message[key] for key in PLAN_KEYS})
        self.spec["await_go"] = bool(message.get("await_go"))

    def await_go(self) -> None:
        """Wait until the judge says the device is ours alone (a plan sent while the reference still ran on it)."""
        if not self.spec.get("await_go"):
            return
        self.phase("wait_go")
        self._receive("go", "the timing")
        self.spec["await_go"] = False

    def _receive(self, kind: str, before: str) -> dict[str, Any]:
        """The judge's next message, which must be of type `kind` (descriptors sent with it are closed)."""
        try:
            message, fds = self.channel.receive()
        except channel.ChannelClosed as exc:
            raise JobFailure("infra_error", f"the judge closed the channel before {before}: {exc}")
        for fd in fds:
            os.close(fd)
        if message.get("type") != kind:
            raise JobFailure("infra_error", f"expected {kind}, got a {message.get('type')!r} message")
        return message

    def outputs(self) -> OutputFiles:
        """Where kept outputs go: exported device memory on a GPU with a channel, files otherwise."""
        if self.device.type == "cuda" and self.channel is not None:
            return DeviceOutputs(self.dir, self.channel)
        return OutputFiles(self.dir)

    def phase(self, name: str) -> None:
        self.phase_starts.append((name, time.monotonic()))
        print(f"[egg worker] phase: {name}", flush=True)
        tmp = os.path.join(self.dir, "phase.tmp")
        with open(tmp, "w") as f:
            f.write(name)
        os.replace(tmp, os.path.join(self.dir, "phase"))

    def phase_seconds(self) -> dict[str, float]:
        """How long each phase took (the last one runs to now)."""
        ends = [t for _, t in self.phase_starts[1:]] + [time.monotonic()]
        return {name: round(end - start, 4) for (name, start), end in zip(self.phase_starts, ends)}

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
    CUDA and compile the judge's own timing kernel into a cache only egg can write (a candidate may write the
    compile cache it later runs from, never the one the judge's kernels come from)."""
    if job.device.type != "cuda":
        return
    job.phase("cuda_init")
    torch.ones(1, device=job.device)
    if job.options.get("timing") and job.spec["kind"] == "candidate":
        if trusted_cache:
            os.environ["TRITON_CACHE_DIR"] = trusted_cache
        timing.prepare_head_start(job.options["head_start_mode"])


def run_job(spec_path: str, isolation: dict[str, Any] | None = None, job: Job | None = None) -> int:
    """Run one job and write its result. Returns the process exit code (0 when a result was written)."""
    job = job or Job(spec_path)
    result: dict[str, Any] = {"kind": job.spec["kind"], "isolation": isolation or {}}
    try:
        job.phase("setup")
        job.connect()
        hold_fp32_to_fp32()
        if job.spec["kind"] == "reference":
            try:
                ReferenceRun(job, result).run()
            except Exception as exc:  # the problem's own code failed: reported, never blamed on a candidate
                raise JobFailure("infra_error", f"the reference raised {type(exc).__name__}: {exc}", traceback.format_exc())
        else:
            CandidateRun(job, result).run()
        job.phase("done")
    except JobFailure as failure:
        result["failure"] = {"status": failure.status, "message": failure.message, "detail": failure.detail}
    result["phase_s"] = job.phase_seconds()
    job.write_result(result)
    if job.channel is not None:
        job.channel.close()
    return 0


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


def make_inputs(get_inputs, input_set: dict[str, Any], device: torch.device) -> list[Any]:
    """The inputs of one named set: `get_inputs()` under the set's seed, made signed for a `signed` set.

    Tensors are created on the device itself (torch's default device is set while `get_inputs()` runs): the
    device's generator is seeded too, so every process draws the same values, and a GiB of inputs costs
    milliseconds instead of seconds of CPU time.
    """
    torch.manual_seed(input_set["seed"])
    with device:
        inputs = list(get_inputs())
        if input_set.get("signed"):
            gen = torch.Generator(device=device).manual_seed(input_set["seed"] + 1)
            inputs = [
                torch.randn(v.shape, generator=gen, device=device).to(v.dtype)
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v
                for v in inputs
            ]
    return to_device(inputs, device)


def checksum(inputs: list[Any]) -> list[float | None]:
    """A number per input, so the parent can tell that reference and candidate saw the same inputs."""
    return [float(torch.sum(v, dtype=torch.float64)) if isinstance(v, torch.Tensor) else None for v in inputs]


def flatten_output(out: Any) -> tuple[str, list[Any]]:
    """('tensor', [t]) or ('tuple:N', items) or ('list:N', items); anything else is described by its type name."""
    if isinstance(out, torch.Tensor):
        return "tensor", [out]
    if isinstance(out, (tuple, list)):
        return f"{type(out).__name__}:{len(out)}", list(out)
    return f"other:{type(out).__name__}", []


def describe(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "device": t.device.type}


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal content (NaN equals NaN), for telling whether an input was written."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


def model_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


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


# The reference ----------------------------------------------------------------------------------------------------


class ReferenceRun:
    """Runs the problem's Model on every input set, times the baselines, and records what a verdict needs."""

    def __init__(self, job: Job, result: dict[str, Any]) -> None:
        self.job, self.result = job, result
        self.outputs = job.outputs()

    def run(self) -> None:
        """mode "full": outputs, costs and baselines; "outputs": the outputs alone (the rest is cached)."""
        job, spec = self.job, self.job.spec
        full = spec.get("mode", "full") == "full"
        self.result["environment"] = environment(job.device)
        problem = load_module(spec["problem_path"], "egg_reference")
        torch.manual_seed(job.options["seed"])
        init = problem.get_init_inputs()
        torch.manual_seed(job.options["seed"])
        model = problem.Model(*init).to(job.device)
        job.phase("reference")
        self.result["structure"], self.result["checksums"] = {}, {}
        timed_inputs = []
        for input_set in spec["input_sets"] + spec["timed_sets"]:
            inputs = make_inputs(problem.get_inputs, input_set, job.device)
            self.result["checksums"][input_set["name"]] = checksum(inputs)
            with torch.no_grad():
                out = model(*inputs)
            job.sync()
            self.record(input_set["name"], out)
            if full and input_set in spec["timed_sets"]:
                timed_inputs.append(inputs)
            del out
        self.outputs.finish()
        self.result["output_transport"] = _transport(self.outputs)
        if not full:
            return
        self.record_costs(model, make_inputs(problem.get_inputs, spec["input_sets"][0], job.device))
        if job.device.type == "cuda" and job.options["timing"]:
            job.phase("baselines")
            self.time_baselines(model, timed_inputs)

    def record(self, name: str, out: Any) -> None:
        kind, items = flatten_output(out)
        self.result["structure"][name] = {"kind": kind, "tensors": [describe(t) for t in items if isinstance(t, torch.Tensor)]}
        self.outputs.keep(name, [t for t in items if isinstance(t, torch.Tensor)])

    def record_costs(self, model: torch.nn.Module, inputs: list[Any]) -> None:
        """Compute ops used, FLOPs and the fewest bytes any implementation must move (for the physical limit)."""
        from torch.utils.flop_counter import FlopCounterMode

        recorder = OpRecorder()
        with torch.no_grad(), recorder:
            out = model(*inputs)
        flop_counter = FlopCounterMode(display=False)
        with torch.no_grad(), flop_counter:
            model(*inputs)
        out_bytes = tensor_bytes(flatten_output(out)[1])
        self.result["ops"] = sorted(recorder.ops)
        self.result["flops"] = int(flop_counter.get_total_flops())
        self.result["min_bytes"] = tensor_bytes(inputs) + model_bytes(model) + out_bytes

    def time_baselines(self, model: torch.nn.Module, sets: list[list[Any]]) -> None:
        job, opts = self.job, self.job.options
        buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
        flush = timing.L2Flush(opts["l2_flush_bytes"], job.device)
        self.result["copy_bandwidth_bytes_per_s"] = timing.copy_bandwidth_bytes_per_s(job.device, head_start_ms=opts["head_start_ms"], head_start_mode=opts["head_start_mode"])
        baselines, errors = {}, {}
        runners = {"eager": model}
        if "compile" in opts["baselines"]:
            runners["compile"] = torch.compile(model)
        for name, fn in runners.items():
            try:
                with torch.no_grad():
                    samples = time_model(fn, buffers, sets, opts, flush)
                    baselines[name] = timing.summarize(samples.event_ms, samples.method)
                    if opts.get("cuda_graph"):
                        graphed = timing.time_graph(lambda: fn(*buffers), warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
                        baselines[f"{name}_graph"] = timing.summarize(graphed.event_ms, graphed.method)
            except Exception as exc:  # a baseline that cannot run (torch.compile can fail) is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
        self.result["baselines"], self.result["baseline_errors"] = baselines, errors


def _transport(outputs: OutputFiles) -> str:
    if isinstance(outputs, DeviceOutputs):
        return f"files ({outputs.fallback})" if outputs.fallback else "device"
    return "files"


def load_set(buffers: list[Any], source: list[Any]) -> None:
    """Copy one input set's contents into the fixed input buffers (same pointers, new values)."""
    for dst, src in zip(buffers, source):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def time_model(fn, buffers, sets, opts, flush, on_output=None) -> timing.Samples:
    return timing.time_calls(
        lambda: fn(*buffers),
        lambda i: load_set(buffers, sets[i % len(sets)]),
        warmup=opts["warmup"],
        trials=opts["timing_trials"],
        flush=flush,
        on_output=on_output,
        **timing.timing_args(opts),
    )


# The candidate ----------------------------------------------------------------------------------------------------


def is_compile_error(exc: BaseException) -> bool:
    from triton.compiler.errors import CompilationError

    return isinstance(exc, (CompilationError, SyntaxError))


class CandidateRun:
    """Loads ModelNew, calls it on every input set, and records outputs and what the probes saw."""

    def __init__(self, job: Job, result: dict[str, Any]) -> None:
        self.job, self.result = job, result
        self.outputs = job.outputs()
        self.calls: list[dict[str, Any]] = []
        self.launches = LaunchCounter(os.path.abspath(job.spec["candidate_path"]))

    def run(self) -> None:
        job = self.job
        self.launches.install()
        warm_up(job.device)
        if job.device.type == "cuda" and job.options["timing"]:
            timing.prepare_head_start(job.options["head_start_mode"])  # the judge's kernel, before the candidate's code
        snapshot = NamespaceSnapshot()  # after our own probes, before any candidate code
        get_inputs, get_init_inputs = self.load_problem()
        job.await_plan()
        model = self.load_candidate(get_init_inputs)
        self.result["checksums"] = {}
        self.threads_before = live_threads()
        try:
            self.check_calls(model, get_inputs)
            job.await_go()  # the reference's outputs may still be computed beside our calls: never beside the timing
            if job.device.type == "cuda" and job.options["timing"]:
                job.phase("timing")
                self.time_candidate(model, get_inputs)
        finally:
            self.result["calls"] = self.calls
            self.result["kernels"] = dict(self.launches.counts)
            self.result["tampering"] = snapshot.changes()
            self.outputs.finish()
            self.result["output_transport"] = _transport(self.outputs)

    def load_problem(self):
        problem = load_module(self.job.spec["problem_path"], "egg_problem")
        # The candidate gets the problem's inputs, never its Model.
        sys.modules.pop("egg_problem", None)
        return problem.get_inputs, problem.get_init_inputs

    def load_candidate(self, get_init_inputs) -> torch.nn.Module:
        job = self.job
        job.phase("import")
        try:
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
            return model_cls(*init).to(job.device)
        except Exception as exc:
            raise JobFailure("compile_error", f"ModelNew(*get_init_inputs()) failed: {type(exc).__name__}: {exc}", traceback.format_exc())

    def call(self, model, inputs: list[Any], name: str, *, audit_ops: bool = False) -> Any:
        """One observed call: poisoned free memory, input-mutation check, launches, threads, outputs kept."""
        before = [v.clone() if isinstance(v, torch.Tensor) else None for v in inputs]
        self.poison()
        launches_before, own_before = self.launches.total(), self.launches.own_total()
        recorder = OpRecorder() if audit_ops else None
        try:
            with torch.no_grad(), (recorder or nullcontext()):
                out = model(*inputs)
            self.job.sync()
        except Exception as exc:
            status = "compile_error" if is_compile_error(exc) else "runtime_error"
            raise JobFailure(status, f"call {name} raised {type(exc).__name__}: {exc}", traceback.format_exc())
        kind, items = flatten_output(out)
        record = {
            "name": name,
            "kind": kind,
            "types": [f"{type(t).__module__}.{type(t).__qualname__}" for t in items],
            "tensors": [describe(t) for t in items if isinstance(t, torch.Tensor)],
            "launches": self.launches.total() - launches_before,
            "own_launches": self.launches.own_total() - own_before,
            "mutated_inputs": [i for i, (a, b) in enumerate(zip(before, inputs)) if a is not None and not same_tensor(a, b)],
            "threads_after": live_threads() - self.threads_before,
        }
        if recorder is not None:
            record["ops"] = sorted(recorder.ops)
        self.calls.append(record)
        self.keep(name, items, full=name in self.full_names)
        return out

    @property
    def full_names(self) -> set[str]:
        return {s["name"] for s in self.job.spec["input_sets"]}

    def keep(self, name: str, items: list[Any], *, full: bool = True) -> None:
        """Keep a call's outputs for the parent: whole for the correctness trials, subsampled (large ones) for the
        extra calls. type(t) is exact on purpose: a Tensor subclass can compute lazily when the checker reads it."""
        sample = None if full else self.job.spec.get("sample")
        self.outputs.keep(name, [subsample(t, sample) for t in items if type(t) is torch.Tensor])

    def poison(self) -> None:
        """Fill memory the allocator will hand out next with NaN, so outputs that are never written show up."""
        for shape, dtype in self.job.spec.get("poison", []):
            dt = getattr(torch, dtype)
            t = torch.empty(shape, dtype=dt, device=self.job.device)
            t.fill_(math.nan if dt.is_floating_point else -1)
            del t

    def check_calls(self, model, get_inputs) -> None:
        job, spec = self.job, self.job.spec
        sets = spec["input_sets"]
        for i, input_set in enumerate(sets):
            inputs = make_inputs(get_inputs, input_set, job.device)
            self.result["checksums"][input_set["name"]] = checksum(inputs)
            if i == 0:
                job.phase("first_call")
            self.call(model, inputs, input_set["name"])
            if i == 0:
                job.phase("correctness")
                first_inputs = inputs
        for k in range(job.options["repeat_calls"]):
            self.call(model, first_inputs, f"repeat_{k + 1}")
        job.phase("audit")
        audit_inputs = make_inputs(get_inputs, sets[1 % len(sets)], job.device)
        self.call(model, audit_inputs, "audit", audit_ops=True)

    def time_candidate(self, model, get_inputs) -> None:
        job, opts = self.job, self.job.options
        timed = job.spec["timed_sets"]
        sets = [make_inputs(get_inputs, s, job.device) for s in timed]
        for s, inputs in zip(timed, sets):
            self.result["checksums"][s["name"]] = checksum(inputs)
        buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
        flush = timing.L2Flush(opts["l2_flush_bytes"], job.device)
        last_round = opts["timing_trials"] - len(sets)
        launches_before = self.launches.total()

        def on_output(i: int, out: Any) -> None:
            if i >= last_round:  # the last call of each input set is verified by the parent
                self.keep(timed[i % len(sets)]["name"], flatten_output(out)[1], full=False)

        with torch.no_grad():
            samples = time_model(model, buffers, sets, opts, flush, on_output)
        self.result["timing"] = timing.summarize(samples.event_ms, samples.method)
        self.result["timing_wall"] = timing.summarize(samples.wall_ms, "host_to_device_sync")
        self.result["timing_launch"] = timing.summarize(samples.launch_ms, "host_launch")
        self.result["timing_head_start_capped"] = samples.head_start_capped
        self.result["timed_launches"] = self.launches.total() - launches_before
        self.result["timed_calls"] = samples.calls
        self.result["threads_after_timing"] = live_threads() - self.threads_before
        if opts.get("cuda_graph"):
            graphed = timing.time_graph(lambda: model(*buffers), warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
            self.result["timing_graph"] = timing.summarize(graphed.event_ms, graphed.method)
