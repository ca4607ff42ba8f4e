"""The long-lived measurement process: loads one kernel and its launch once, then checks and times configs.

Run as `python -m pipeline.tuning.worker`. Imports torch, triton, numpy and the standard library only (plus egg modules
that keep to the same rule), so it runs on the GPU machine's image as is.

Protocol: JSON lines. Requests arrive on stdin; replies leave on the file descriptor that was stdout when the
process started (fd 1 itself is pointed at stderr, so whatever a kernel prints goes to the log, never into a reply).
    {"op": "setup", "kernel_path", "recipe", "settings", "reference_config"} -> {"event": "ready", "environment"}
                                                                           or {"event": "setup_failed", "message"}
    {"op": "measure", "config", "best_ms"} -> {"event": "started"}, then {"event": "result", "status", "time_ms",
                                              "detail", "trials", ...}
Each config is checked against the reference output (the reference config's, or the first config that ran) before
it is timed: one that changes the results is rejected as a mismatch. Timing stops early when a config's first
trials are already `too_slow_factor` times slower than the best so far. Without a GPU (Triton's interpreter),
timing is skipped and said so; the check still runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pipeline.judge import timing
from pipeline.judge.compare import tolerance
from pipeline.tuning.recipe import LaunchRecipe, materialize

class ConfigFailure(Exception):
    """Ends one config's measurement with a status."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def load_kernel(path: str, name: str) -> Any:
    """The kernel object `name` of the file at `path`, without an autotuner around it (we choose configs)."""
    from triton.runtime.autotuner import Autotuner

    module_name = "egg_tuned_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Triton and dataclasses look modules up by name
    spec.loader.exec_module(module)
    kernel = getattr(module, name, None)
    if kernel is None:
        raise LookupError(f"{path} defines no {name}")
    while isinstance(kernel, Autotuner):
        kernel = kernel.fn
    return kernel


def classify(exc: BaseException) -> str:
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    if isinstance(exc, OutOfResources):
        return "shared_overflow" if "shared" in str(exc) else "runtime_error"
    if isinstance(exc, (CompilationError, SyntaxError)):
        return "compile_error"
    return "runtime_error"


def too_slow(probe_ms: Sequence[float], best_ms: float | None, factor: float) -> bool:
    """Stop timing a config when even its fastest probe trial is `factor` times slower than the best so far."""
    return best_ms is not None and len(probe_ms) > 0 and min(probe_ms) > factor * best_ms


def environment(device: torch.device) -> dict[str, str]:
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "device": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=str(props.multi_processor_count), cuda=str(torch.version.cuda))
    return env


class Session:
    """One kernel, its arguments on the device, the reference output, and the best time so far."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.settings = request["settings"]
        self.device = torch.device(self.settings["device"])
        self.recipe = LaunchRecipe.from_json(request["recipe"])
        self.kernel = load_kernel(request["kernel_path"], self.recipe.kernel)
        self.args = materialize(self.recipe, self.device)
        self.reference: dict[str, torch.Tensor] | None = None
        self.best_ms: float | None = None
        self.compiled: Any = None
        self.flush = timing.L2Flush(self.settings["l2_flush_bytes"], self.device) if self.timed else None
        if request.get("reference_config") is not None:
            self.reference = self.check(request["reference_config"])

    @property
    def timed(self) -> bool:
        return self.device.type == "cuda"

    def launcher(self, config: dict[str, Any]) -> Callable[[], Any]:
        """A call that launches the kernel with `config` (grid and keywords worked out once, not per trial, so
        the host does as little as possible between a trial's start event and its launch)."""
        kwargs = {**self.args, **self.recipe.constexprs, **config}
        grid = self.recipe.grid_for(config)
        kernel = self.kernel
        return lambda: kernel[grid](**kwargs)

    def sync(self) -> None:
        if self.timed:
            torch.cuda.synchronize()

    def check(self, config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Run once on NaN-poisoned outputs; return the outputs (compared with the reference when there is one)."""
        for name in self.recipe.outputs():
            out = self.args[name]
            out.fill_(float("nan") if out.is_floating_point() else -1)
        try:
            self.compiled = self.launcher(config)()
            self.sync()
        except Exception as exc:
            raise ConfigFailure(classify(exc), f"{type(exc).__name__}: {exc}"[:2000]) from None
        outputs = {name: self.args[name].clone() for name in self.recipe.outputs()}
        if self.reference is not None:
            self.compare(outputs)
        return outputs

    def compare(self, outputs: dict[str, torch.Tensor]) -> None:
        for name, out in outputs.items():
            ref = self.reference[name]
            tol = tolerance(ref.dtype)
            close = torch.isclose(out, ref, rtol=tol, atol=tol, equal_nan=True) if ref.is_floating_point() else out == ref
            if not bool(close.all()):
                bad = int((~close).sum())
                worst = float((out.double() - ref.double()).abs().nan_to_num(float("inf")).max())
                raise ConfigFailure("mismatch", f"{name}: {bad} of {out.numel()} elements differ from the reference (max abs error {worst:.3g}, atol=rtol={tol:g})")

    def measure(self, config: dict[str, Any], best_ms: float | None) -> dict[str, Any]:
        if best_ms is not None:
            self.best_ms = best_ms if self.best_ms is None else min(self.best_ms, best_ms)
        outputs = self.check(config)
        if self.reference is None:
            self.reference = outputs
        facts = self.binary_facts()
        if not self.timed:
            return {"status": "ok", "time_ms": None, "detail": "timing skipped: no GPU (Triton interpreter)", "trials": 0, **facts}
        return {**self.time(config), **facts}

    def time(self, config: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        call = self.launcher(config)
        probe = timing.time_calls(call, lambda i: None, warmup=1, trials=s["probe_trials"], flush=self.flush, **{**timing.timing_args(s), "warmup_ms": 0.0})
        if too_slow(probe.event_ms, self.best_ms, s["too_slow_factor"]):
            return {"status": "too_slow", "time_ms": min(probe.event_ms), "trials": len(probe.event_ms),
                    "detail": f"first {len(probe.event_ms)} trials > {s['too_slow_factor']}x the best ({self.best_ms:.4g} ms)"}
        samples = timing.time_calls(call, lambda i: None, warmup=s["warmup"], trials=s["trials"], flush=self.flush, **timing.timing_args(s))
        self.compare({name: self.args[name] for name in self.recipe.outputs()})  # the timed calls' results too
        median = timing.summarize(samples.event_ms, samples.method)["median_ms"]
        self.best_ms = median if self.best_ms is None else min(self.best_ms, median)
        return {"status": "ok", "time_ms": median, "trials": len(samples.event_ms), "detail": ""}

    def binary_facts(self) -> dict[str, Any]:
        """Registers, spills and shared memory of the compiled kernel, when the launch returned one (GPU)."""
        compiled = self.compiled
        if compiled is None or not hasattr(compiled, "n_regs"):
            return {}
        return {"registers": compiled.n_regs, "spills": compiled.n_spills, "shared_bytes": compiled.metadata.shared}


def serve(channel: Any) -> None:
    session: Session | None = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "setup":
            try:
                session = Session(request)
                reply = {"event": "ready", "environment": environment(session.device)}
            except ConfigFailure as failure:
                reply = {"event": "setup_failed", "message": f"the reference config failed ({failure.status}): {failure.detail}"}
            except Exception as exc:  # the kernel file or recipe is broken: report it, the parent decides
                traceback.print_exc()
                reply = {"event": "setup_failed", "message": f"{type(exc).__name__}: {exc}"[:2000]}
        else:
            _send(channel, {"event": "started"})
            reply = {"event": "result", **_measure(session, request)}
        _send(channel, reply)


def _measure(session: Session | None, request: dict[str, Any]) -> dict[str, Any]:
    if session is None:
        return {"status": "runtime_error", "detail": "measure before setup", "time_ms": None, "trials": 0}
    try:
        return session.measure(request["config"], request.get("best_ms"))
    except ConfigFailure as failure:
        return {"status": failure.status, "detail": failure.detail, "time_ms": None, "trials": 0}
    except Exception as exc:  # one config must not end the worker
        traceback.print_exc()
        return {"status": classify(exc), "detail": f"{type(exc).__name__}: {exc}"[:2000], "time_ms": None, "trials": 0}


def _send(channel: Any, message: dict[str, Any]) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def main() -> None:
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # kernel output goes to the log, never into the protocol
    sys.stdout = sys.stderr
    serve(channel)


if __name__ == "__main__":
    main()
