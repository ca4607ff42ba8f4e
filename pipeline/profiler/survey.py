"""The static survey of a candidate: which kernels it launches, with what grid and configuration, compiled for sm_90.

The candidate's forward runs once, in a subprocess (its code is untrusted), on `meta` tensors (shapes without
memory), so a problem with GiB of inputs costs nothing. Launches of Triton kernels are intercepted, never executed:
their arguments are specialized the way Triton's launcher would, and each distinct configuration is compiled once.
Autotuned kernels contribute every configuration they could pick. The problem's analytic costs come along.

Child side: `python -m pipeline.profiler.survey SPEC OUT`. Imports torch, triton and the standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.static import (
    StaticCompileError,
    StaticFacts,
    compile_specialization,
    specialize,
)

SURVEY_TIMEOUT_S = 300.0
CPU_FALLBACK_MAX_BYTES = 256 << 20  # a forward that fails on meta tensors is retried on real CPU tensors up to this
MAX_DISTINCT_COMPILES = 48


@dataclass(frozen=True)
class KernelLaunch:
    """One distinct kernel configuration launched by the candidate, and how."""

    facts: StaticFacts
    grid: tuple[int, ...]  # blocks per grid dimension (empty when the grid could not be evaluated)
    calls: int  # launches of it in one forward call
    autotuned: bool = False  # one of an autotuner's configurations; which one it picks is known only on the GPU


@dataclass(frozen=True)
class Survey:
    """What the static survey found. `errors` are data: a kernel that failed to compile, a forward that failed."""

    launches: tuple[KernelLaunch, ...]
    errors: tuple[str, ...]
    ran_on: str  # "meta", "cpu", or "" when the forward never completed
    costs: ProblemCosts | None
    duration_s: float

    @property
    def forward_launches(self) -> int:
        """Triton launches in one forward call; an autotuned kernel counts once, not once per configuration."""
        plain = sum(launch.calls for launch in self.launches if not launch.autotuned)
        tuned: dict[str, int] = {}
        for launch in self.launches:
            if launch.autotuned:
                tuned[launch.facts.kernel] = max(tuned.get(launch.facts.kernel, 0), launch.calls)
        return plain + sum(tuned.values())


# Parent side ------------------------------------------------------------------------------------------------------


def survey_candidate(candidate_path: str | Path, problem_path: str | Path, *, timeout_s: float = SURVEY_TIMEOUT_S) -> Survey:
    """Run the survey of a candidate in the judge's sandbox (it imports the candidate and the problem, both user
    code); a crash or timeout comes back as an error, not a raise."""
    from pipeline.judge import launcher
    from pipeline.types import from_jsonable

    start = time.monotonic()
    candidate, problem = str(Path(candidate_path).resolve()), str(Path(problem_path).resolve())
    # Triton compiles for the GPU, not through its interpreter, and the survey never touches a GPU (it must not
    # disturb a measurement)
    with tempfile.TemporaryDirectory(prefix="egg-survey-") as folder:
        spec, out = Path(folder) / "spec.json", Path(folder) / "survey.json"
        spec.write_text(json.dumps({"candidate_path": candidate, "problem_path": problem}))
        finished = launcher.run("pipeline.profiler.survey", [str(spec), str(out)], workdir=folder, read_only=(candidate, problem),
                                device="cuda", timeout_s=timeout_s, environment={"CUDA_VISIBLE_DEVICES": ""})
        data = launcher.read_job_json(out) if finished.error is None else None
        if isinstance(data, dict) and _bounded(data):
            data["duration_s"] = round(time.monotonic() - start, 3)
            try:
                return from_jsonable(Survey, data)
            except Exception:  # the candidate's process wrote it: what does not read as a survey is no survey
                pass
        tail = finished.log_tail
    error = f"the survey {finished.error}" if finished.error else "the survey wrote no result that reads as one"
    return Survey((), (error, *([tail] if tail else [])), "", None, round(time.monotonic() - start, 3))


def _bounded(value: Any, depth: int = 0) -> bool:
    """Every number of a survey the candidate's process wrote is one a real survey can have (finite, under 2**62),
    and its nesting is shallow: an integer of 400 digits would overflow the occupancy arithmetic."""
    if depth > 12:
        return False
    if isinstance(value, dict):
        return all(_bounded(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_bounded(v, depth + 1) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return abs(value) < 2**62 and (isinstance(value, int) or math.isfinite(value))
    return True


# Child side -------------------------------------------------------------------------------------------------------


class LaunchInterceptor:
    """Replaces Triton's launch paths so that launches are recorded (specialized, with their grid), not run."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, str, tuple[int, ...], bool]] = []  # (specialization, key, grid, autotuned)
        self.errors: list[str] = []
        self._autotuning = False

    def install(self) -> None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        interceptor = self

        def jit_run(kernel, *args, grid, warmup, **kwargs):
            if not warmup:
                interceptor.record(kernel, args, kwargs, grid)

        def autotune_run(tuner, *args, **kwargs):
            tuner.nargs = dict(zip(tuner.arg_names, args))
            try:
                configs = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs
            except Exception:  # a pruning hook may read tensor values, which meta tensors do not have
                configs = tuner.configs
            interceptor._autotuning = len(configs) > 1
            try:
                for config in configs:
                    tuner.fn.run(*args, **kwargs, **config.all_kwargs())
            finally:
                interceptor._autotuning, tuner.nargs = False, None

        JITFunction.run = jit_run
        Autotuner.run = autotune_run

    def record(self, kernel: Any, args: tuple, kwargs: dict, grid: Any) -> None:
        options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
        try:
            spec = specialize(kernel, args, kwargs, **options)
        except StaticCompileError as exc:
            self.errors.append(str(exc))
            return
        self.records.append((spec, spec.key(), _grid(kernel, args, kwargs, grid), self._autotuning))

    def clear(self) -> None:
        self.records.clear()


def _grid(kernel: Any, args: tuple, kwargs: dict, grid: Any) -> tuple[int, ...]:
    named = {name: param.default for name, param in kernel.signature.parameters.items()}
    named.update(zip(kernel.arg_names, args))
    named.update(kwargs)
    try:
        value = grid(named) if callable(grid) else grid
        return tuple(int(g) for g in (value if isinstance(value, (tuple, list)) else (value,)))
    except Exception:
        return ()


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads kernel sources through the module
    spec.loader.exec_module(module)
    return module


def _forward(module: Any, problem: Any, device: str) -> None:
    import torch

    with torch.device(device), torch.no_grad():
        torch.manual_seed(42)
        init = problem.get_init_inputs()
        torch.manual_seed(42)
        model = module.ModelNew(*init)
        torch.manual_seed(42)
        model(*problem.get_inputs())


def _run_forward(module: Any, problem: Any, interceptor: LaunchInterceptor, costs: ProblemCosts | None, errors: list[str]) -> str:
    """Run the forward on meta tensors, else (if the inputs are small) on CPU tensors. Returns where it ran."""
    for device in ("meta", "cpu"):
        if device == "cpu" and (costs is None or costs.min_bytes > CPU_FALLBACK_MAX_BYTES):
            errors.append("not retried on CPU tensors: the problem's tensors are too large (or unknown)")
            return ""
        try:
            _forward(module, problem, device)
            return device
        except Exception as exc:
            errors.append(f"the forward failed on {device} tensors: {type(exc).__name__}: {str(exc)[:300]}")
            interceptor.clear()
    return ""


def _compile_launches(interceptor: LaunchInterceptor, errors: list[str]) -> list[dict[str, Any]]:
    from pipeline.types import to_jsonable

    counts: dict[tuple[str, tuple[int, ...], bool], int] = {}
    specs: dict[str, Any] = {}
    for spec, key, grid, autotuned in interceptor.records:
        counts[(key, grid, autotuned)] = counts.get((key, grid, autotuned), 0) + 1
        specs.setdefault(key, spec)
    compiled: dict[str, StaticFacts | None] = {}
    for key, spec in list(specs.items())[:MAX_DISTINCT_COMPILES]:
        try:
            compiled[key] = compile_specialization(spec)
        except StaticCompileError as exc:
            compiled[key] = None
            errors.append(str(exc))
    if len(specs) > MAX_DISTINCT_COMPILES:
        errors.append(f"{len(specs)} distinct kernel configurations; compiled the first {MAX_DISTINCT_COMPILES}")
    launches = []
    for (key, grid, autotuned), calls in counts.items():
        if compiled.get(key) is not None:
            launches.append(to_jsonable(KernelLaunch(compiled[key], grid, calls, autotuned)))
    return launches


def run_survey(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: costs of the problem, then the candidate's launches, compiled. Never raises."""
    import torch

    from pipeline.profiler.costs import problem_costs
    from pipeline.types import to_jsonable

    errors: list[str] = []
    problem = load_module(spec["problem_path"], "egg_survey_problem")
    costs = None
    try:
        costs = problem_costs(problem)
    except Exception as exc:
        errors.append(f"the problem's costs could not be computed on meta tensors: {type(exc).__name__}: {str(exc)[:300]}")
    interceptor = LaunchInterceptor()
    interceptor.install()
    torch.cuda.synchronize = lambda *a, **k: None  # a candidate's sync has nothing to wait for here
    ran_on = ""
    try:
        module = load_module(spec["candidate_path"], "egg_candidate")
        ran_on = _run_forward(module, problem, interceptor, costs, errors)
    except Exception as exc:
        errors.append(f"importing the candidate failed: {type(exc).__name__}: {str(exc)[:300]}")
    launches = _compile_launches(interceptor, errors) if ran_on else []
    errors.extend(interceptor.errors)
    return {"launches": launches, "errors": errors, "ran_on": ran_on, "costs": to_jsonable(costs), "duration_s": 0.0}


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    try:
        result = run_survey(json.loads(Path(spec_path).read_text()))
    except BaseException:
        traceback.print_exc()
        return 70
    Path(out_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
