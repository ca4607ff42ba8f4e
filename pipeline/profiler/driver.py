"""The GPU-side program that `egg profile` runs (under `ncu`, or under the torch profiler): one measured call.

It builds the problem's inputs and the candidate's ModelNew the way the judge does (seed 42, inputs created on the
device, fp32 kept fp32 in library ops), warms up (compiles, autotunes), flushes L2, then makes ONE measured call:
between cudaProfilerStart/Stop and inside the NVTX range `egg_measured` (NCU profiles only that), or inside
torch.profiler (Kineto trace).
It writes a JSON result: environment, the Triton kernels launched, and what each compiled to on this device.

Usage: python -m pipeline.profiler.driver SPEC.json. Imports: torch, triton and the standard library only (and egg
modules that keep to the same rule), so it runs on the GPU machine's image as is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

NVTX_RANGE = "egg_measured"


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(spec: dict[str, Any], device):
    """(model, inputs) as the judge builds them; the candidate never sees the problem's Model."""
    import torch

    problem = load_module(spec["problem_path"], "egg_problem")
    get_inputs, get_init_inputs = problem.get_inputs, problem.get_init_inputs
    sys.modules.pop("egg_problem", None)
    candidate = load_module(spec["candidate_path"], "egg_candidate")
    torch.manual_seed(spec["seed"])
    init = get_init_inputs()
    torch.manual_seed(spec["seed"])
    model = candidate.ModelNew(*init).to(device)
    torch.manual_seed(spec["seed"])
    with device:
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in get_inputs()]
    return candidate, model, inputs


def measured_call(model, inputs, mode: str, trace_path: str | None) -> float:
    """One call of the model inside the measured region; returns its host wall time in ms."""
    import torch

    start = time.perf_counter()
    if mode == "ncu":  # ncu runs with --profile-from-start off: it profiles between start() and stop()
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.profiler.stop()
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(*inputs)
            torch.cuda.synchronize()
        prof.export_chrome_trace(trace_path)
    return 1e3 * (time.perf_counter() - start)


def compiled_kernels(module) -> list[dict[str, Any]]:
    """What each Triton kernel of the candidate compiled to on this device (registers, spills, shared, binary)."""
    from triton.runtime.jit import JITFunction

    found = []
    for value in vars(module).values():
        fn, depth = value, 0
        while not isinstance(fn, JITFunction) and hasattr(fn, "fn") and depth < 8:
            fn, depth = fn.fn, depth + 1
        if not isinstance(fn, JITFunction):
            continue
        for caches in getattr(fn, "device_caches", {}).values():
            for kernel in caches[0].values():
                found.append(describe_kernel(kernel))
    return found


def describe_kernel(kernel) -> dict[str, Any]:
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    kernel._init_handles()
    meta = kernel.metadata
    constants = getattr(kernel.src, "constants", {}) or {}
    names = kernel.src.fn.arg_names if hasattr(kernel.src, "fn") else []
    return {
        "kernel": meta.name,
        "num_warps": meta.num_warps,
        "num_stages": meta.num_stages,
        "constexprs": {names[p[0]]: v for p, v in constants.items() if len(p) == 1 and isinstance(v, (int, float, bool, str))},
        "registers": kernel.n_regs,
        "spilled_bytes": kernel.n_spills,
        "dynamic_shared_bytes": meta.shared,
        "binary_sha256": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
    }


def environment(device) -> dict[str, str]:
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": str(torch.version.cuda),
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sms": str(props.multi_processor_count),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from pipeline.judge.probes import LaunchCounter, hold_fp32_to_fp32

    device = torch.device("cuda")
    hold_fp32_to_fp32()
    counter = LaunchCounter(str(Path(spec["candidate_path"]).resolve()))
    counter.install()
    result: dict[str, Any] = {"environment": environment(device)}
    candidate, model, inputs = build(spec, device)
    flush = torch.empty(spec["l2_flush_bytes"] // 4, dtype=torch.int32, device=device)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(spec["warmup"]):
            model(*inputs)
        torch.cuda.synchronize()
        result["warmup_s"] = round(time.perf_counter() - start, 3)
        flush.zero_()
        torch.cuda.synchronize()
        before = dict(counter.counts)
        result["measured_wall_ms"] = round(measured_call(model, inputs, spec["mode"], spec.get("trace_path")), 4)
    result["launches"] = {name: n - before.get(name, 0) for name, n in counter.counts.items() if n - before.get(name, 0)}
    result["compiled"] = compiled_kernels(candidate)
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except BaseException as exc:  # the parent reads the failure from the result file
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    Path(spec["result_path"]).write_text(json.dumps(result))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
