"""The problem's computation recorded by running it: every torch call of one forward, with its arguments, its
outputs' shapes, dtypes and strides, and the aten ops it dispatched.

This is the child side of `pipeline.expert.capture` (`python -m pipeline.expert.tape SPEC OUT`): the problem file
is user code, so it runs here, in a fresh process with a clean environment, never in the caller's.

Why run it rather than trace it symbolically (torch.fx): a recording by execution sees through Python control flow
that depends on shapes (`batch, seq, d = x.shape`, loops over layers, `if self.training`), records modules at the
functional level with every argument explicit (`F.batch_norm(..., training=True, momentum, eps)`), and needs no
model of which modules are leaves. The forward runs on `meta` tensors (shapes without memory), so a problem with
GiB of inputs costs nothing; a forward that needs values (`.item()`, data-dependent branches) is retried on real
CPU tensors when they are small. The recording is specialized to the problem's shapes, as the candidate will be.

Imports: torch and the standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any

CPU_FALLBACK_MAX_ELEMENTS = 1 << 26  # a forward that fails on meta tensors is retried on CPU up to this many input elements


def _canonical_names() -> dict[int, str]:
    """id(callable) -> a name the emitted code can call it by: torch.X, F.X, Tensor.X, torch.special.X."""
    import torch
    import torch.nn.functional as F

    names: dict[int, str] = {}
    for prefix, space in (("F", F), ("torch", torch), ("Tensor", torch.Tensor), ("torch.special", torch.special),
                          ("torch.linalg", torch.linalg), ("torch.fft", torch.fft)):
        for name in dir(space):
            try:
                obj = getattr(space, name)
            except Exception:  # some attributes raise on access (deprecated aliases)
                continue
            if callable(obj):
                names.setdefault(id(obj), f"{prefix}.{name}")
    return names


def function_name(func: Any, names: dict[int, str]) -> str:
    known = names.get(id(func))
    if known:
        return known
    owner = getattr(func, "__self__", None)
    if owner is not None and type(owner).__name__ == "getset_descriptor":  # a property such as Tensor.T or .mT
        return f"Tensor.{owner.__name__}"
    return "?" + str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func))


class Recorder:
    """Records torch calls made at the top level of the forward (calls made inside a recorded call are not seen)."""

    def __init__(self, inputs: list[Any], named: dict[int, tuple[str, str]]) -> None:
        self.names = _canonical_names()
        self.calls: list[dict[str, Any]] = []
        self.ref_ops: set[str] = set()
        self.where: dict[int, dict[str, Any]] = {key: {"p": name} for key, (name, _) in named.items()}
        for index, value in enumerate(inputs):
            if _is_tensor(value):
                self.where[id(value)] = {"in": index}
        self.alive: list[Any] = list(inputs)  # keeps every seen tensor alive, so no id is reused
        self.problems: list[str] = []

    def mode(self):
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        class AtenOps(TorchDispatchMode):
            def __init__(self) -> None:
                super().__init__()
                self.ops: list[str] = []

            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                if name not in self.ops:
                    self.ops.append(name)
                return func(*args, **(kwargs or {}))

        class Calls(TorchFunctionMode):
            def __torch_function__(self, func, types_, args=(), kwargs=None):
                kwargs = kwargs or {}
                with AtenOps() as aten:
                    out = func(*args, **kwargs)
                recorder.record(func, args, kwargs, out, aten.ops)
                return out

        del torch
        return Calls()

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any, aten: list[str]) -> None:
        name = function_name(func, self.names)
        if name == "Tensor.__setitem__" or (name.endswith("_") and not name.endswith("__") and _mutates_internal(args, self.where)):
            self.problems.append(f"{name} writes into a tensor in place; the recording cannot follow the aliasing")
        tensors = _flat_tensors(out)
        if not tensors:
            return
        encoded = {"fn": name, "args": [self.encode(a) for a in args], "kwargs": {k: self.encode(v) for k, v in kwargs.items()},
                   "outputs": [_meta(t) for t in tensors], "tuple": not _is_tensor(out), "aten": aten}
        index = len(self.calls)
        self.calls.append(encoded)
        from pipeline.judge.probes import NON_COMPUTE_OPS  # the judge's own list: what counts as compute

        self.ref_ops.update(op for op in aten if op not in NON_COMPUTE_OPS)
        for position, tensor in enumerate(tensors):
            self.where[id(tensor)] = {"t": [index, position]}
            self.alive.append(tensor)

    def encode(self, value: Any) -> Any:
        import torch

        if _is_tensor(value):
            known = self.where.get(id(value))
            return known if known is not None else {"tensor?": _meta(value)}
        if isinstance(value, torch.Size):
            return {"size": list(value)}
        if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, (list, tuple)):
            return {"list" if isinstance(value, list) else "tuple": [self.encode(v) for v in value]}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": value.type}
        if isinstance(value, slice):
            return {"slice": [self.encode(value.start), self.encode(value.stop), self.encode(value.step)]}
        if value is Ellipsis:
            return {"ellipsis": True}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).removeprefix("torch.")}
        return {"opaque": repr(value)[:200]}


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _flat_tensors(out: Any) -> list[Any]:
    if _is_tensor(out):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(_is_tensor(t) for t in out):
        return list(out)
    return []


def _mutates_internal(args: tuple, where: dict[int, dict[str, Any]]) -> bool:
    """An in-place call on a recorded intermediate that is a view (aliasing the recording cannot follow)."""
    first = args[0] if args else None
    if not _is_tensor(first):
        return False
    return first._base is not None and "t" in where.get(id(first), {})


def _meta(tensor: Any) -> dict[str, Any]:
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch."), "stride": list(tensor.stride()),
            "offset": int(tensor.storage_offset())}


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("egg_expert_problem", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["egg_expert_problem"] = module
    spec.loader.exec_module(module)
    return module


def _build(problem: Any, device: str) -> tuple[Any, list[Any], list[Any]]:
    import torch

    with torch.device(device):
        torch.manual_seed(42)
        init = list(problem.get_init_inputs())
        torch.manual_seed(42)
        model = problem.Model(*init)
        torch.manual_seed(42)
        inputs = list(problem.get_inputs())
    return model, init, inputs


def _named(model: Any) -> tuple[dict[int, tuple[str, str]], list[dict[str, Any]]]:
    named: dict[int, tuple[str, str]] = {}
    listed = []
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in items:
            named.setdefault(id(tensor), (name, kind))
            listed.append({"name": name, "kind": kind, "meta": _meta(tensor)})
    return named, listed


def _scalar(value: Any) -> Any:
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    return {"opaque": repr(value)[:200]}


def record(problem_path: str) -> dict[str, Any]:
    """The recording of one forward of the problem's Model, as JSON data. Never raises: failures are in `errors`."""
    import torch

    problem = _load(problem_path)
    errors: list[str] = []
    for device in ("meta", "cpu"):
        try:
            model, init, inputs = _build(problem, device)
        except Exception as exc:
            errors.append(f"building the model on {device} failed: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        if device == "cpu" and sum(t.numel() for t in inputs if _is_tensor(t)) > CPU_FALLBACK_MAX_ELEMENTS:
            errors.append("not retried on CPU tensors: the inputs are too large")
            break
        named, params = _named(model)
        recorder = Recorder(inputs, named)
        try:
            with torch.no_grad(), recorder.mode():
                out = model(*inputs)
        except Exception as exc:
            errors.append(f"the forward failed on {device} tensors: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        return {
            "ran_on": device,
            "inputs": [{"tensor": _meta(t)} if _is_tensor(t) else {"value": _scalar(t)} for t in inputs],
            "init_inputs": [_scalar(v) for v in init],
            "params": params,
            "calls": recorder.calls,
            "output": recorder.encode(out),
            "ref_ops": sorted(recorder.ref_ops),
            "problems": recorder.problems,
            "errors": errors,
        }
    return {"ran_on": "", "errors": errors}


def main(argv: list[str]) -> int:
    """SPEC names one problem (`problem_path`) or several (`problem_paths`, recorded one after another in this
    process, which saves a torch import per problem: for the repository's own problems only)."""
    spec_path, out_path = argv
    spec = json.loads(Path(spec_path).read_text())
    try:
        if "problem_paths" in spec:
            result: dict[str, Any] = {"results": [record(path) for path in spec["problem_paths"]]}
        else:
            result = record(spec["problem_path"])
    except BaseException:
        traceback.print_exc()
        return 70
    Path(out_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
