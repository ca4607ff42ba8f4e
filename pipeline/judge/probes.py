"""Run-time probes the worker installs before a candidate's code is imported.

Everything here runs inside the process a candidate's code runs in, so none of it is evidence by itself: the
parent treats what these probes report as claims, and they are built so that changing them is hard and shows
(`Integrity` re-checks the judge's own modules after every call, `LaunchCounter` keeps a second count where no
attribute reaches it, `blind_judge_modules` takes egg's modules out of the import system).

Imported by the worker: torch, triton and the standard library only.
"""

from __future__ import annotations

import builtins
import collections
import os
import sys
import threading
import time
from typing import Any, Callable

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# aten ops that move, view or allocate memory without computing anything: a candidate may keep these in torch.
NON_COMPUTE_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
    full full_like new_full fill fill_ zero zero_ scalar_tensor arange lift_fresh lift_fresh_copy detach alias
    view _unsafe_view view_as reshape _reshape_alias permute transpose transpose_ t t_ expand expand_as contiguous
    clone copy copy_ _to_copy to as_strided slice select squeeze squeeze_ unsqueeze unsqueeze_ split split_with_sizes
    chunk unbind flatten unflatten narrow resize_ set_ stride size sym_size sym_stride sym_numel numel is_contiguous
    _local_scalar_dense item movedim movedim permute_copy view_copy index_select_backward dim type_as
    cat stack constant_pad_nd repeat
    """.split()
)
# Library primitives a candidate may keep beside its own Triton kernels when the problem has other work for them
# (a cuBLAS GEMM or a cuDNN convolution with the epilogue fused in Triton): GEMMs, convolutions, pooling, scans and
# resampling. On a problem that is nothing but these, keeping them is the whole job.
LIBRARY_OPS = frozenset(
    """
    mm addmm bmm baddbmm addbmm addmv mv dot vdot matmul linear _scaled_mm _int_mm
    convolution _convolution convolution_overrideable cudnn_convolution cudnn_convolution_transpose
    miopen_convolution mkldnn_convolution _slow_conv2d_forward slow_conv3d_forward slow_conv_transpose2d
    slow_conv_transpose3d _nnpack_spatial_convolution thnn_conv2d slow_conv_dilated2d slow_conv_dilated3d
    conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
    max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices avg_pool1d avg_pool2d avg_pool3d
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d
    adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d mkldnn_max_pool2d
    cumsum cumprod cummax cummin logcumsumexp _cummax_helper _cummin_helper
    upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_bilinear2d upsample_bicubic2d
    upsample_linear1d upsample_trilinear3d _upsample_nearest_exact2d _upsample_bilinear2d_aa
    """.split()
)
# The kinds of library work, for "at most the work the reference gives that kind" (issue 41): a candidate keeps in
# torch only a kind of primitive the reference itself calls, for no more than the reference's work of that kind (a
# row sum written as a GEMM against ones, a softmax's denominator as logcumsumexp, are other work, counted as such).
_FAMILIES = {
    "GEMM": "mm addmm bmm baddbmm addbmm addmv mv dot vdot matmul linear _scaled_mm _int_mm",
    "max pooling": "max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices mkldnn_max_pool2d "
                   "adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d",
    "average pooling": "avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d "
                       "_adaptive_avg_pool2d _adaptive_avg_pool3d",
    "cummax": "cummax _cummax_helper",
    "cummin": "cummin _cummin_helper",
}
LIBRARY_FAMILY = {op: family for family, ops in _FAMILIES.items() for op in ops.split()}


def library_family(op: str) -> str:
    """The kind of library work an aten op does: convolutions and resampling each one kind, scans each op its own."""
    if op in LIBRARY_FAMILY:
        return LIBRARY_FAMILY[op]
    if "conv" in op:
        return "convolution"
    if op.startswith(("upsample", "_upsample")):
        return "resampling"
    return op


# A nominal model of the work an op does, in seconds, so that bytes and FLOPs add up (an H200's copy bandwidth
# and dense peak): only ratios of such times are used, never absolute ones.
NOMINAL_BYTES_PER_S, NOMINAL_FLOPS_PER_S = 4.3e12, 495e12


class LaunchCounter:
    """Counts launches of Triton kernels (compiled or interpreted), per kernel name.

    It wraps `run` on Triton's kernel classes, the one method every launch goes through (autotuned ones too). A
    second total lives in a closure cell no attribute reaches: `tampered()` says whether the two disagree.
    """

    def __init__(self, source_file: str | None = None) -> None:
        self.source_file = source_file
        self.counts: collections.Counter[str] = collections.Counter()
        self._installed: list[tuple[type, object]] = []
        hidden = [0]

        def bump() -> None:
            hidden[0] += 1

        self._bump, self._hidden = bump, (lambda: hidden[0])

    def install(self) -> None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for cls in (JITFunction, InterpretedFunction):
            original = cls.run
            self._installed.append((cls, original))
            cls.run = self._wrap(original)

    def _wrap(self, original):
        counter = self

        def run(kernel, *args, grid, warmup, **kwargs):
            if not warmup:
                counter._count(kernel)
            return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    def _count(self, kernel) -> None:
        fn = getattr(kernel, "fn", None)
        code = getattr(fn, "__code__", None)
        if self.source_file and code is not None and code.co_filename != self.source_file:
            name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
        else:
            name = getattr(fn, "__name__", repr(kernel))
        self.counts[name] += 1
        self._bump()

    def total(self) -> int:
        return sum(self.counts.values())

    def own_total(self) -> int:
        """Launches of kernels defined in the candidate's own file."""
        return sum(n for name, n in self.counts.items() if "." not in name)

    def tampered(self) -> bool:
        """True when the per-name counts no longer add up to the launches actually seen."""
        return self.total() != self._hidden()


class _Recorder(TorchDispatchMode):
    """Base for our dispatch modes. torch wraps a mode's `__torch_dispatch__` in its lazy dynamo-disable, whose
    first call imports torch._dynamo: seconds on a cold host, on the critical path of every fresh worker. These
    modes never run under torch.compile's tracing, so they opt out (`_should_skip_dynamo`; torch versions without
    the hook never wrapped it)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class OpRecorder(_Recorder):
    """Records the aten compute ops (by packet name) that run while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in NON_COMPUTE_OPS:
            self.ops.add(name)
        return func(*args, **(kwargs or {}))


def _tensor_bytes(value: Any) -> int:
    """Bytes a tensor's elements occupy (an expanded view counts its storage, not its broadcast size)."""
    nbytes = value.numel() * value.element_size()
    try:
        return min(nbytes, value.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # meta tensors, sparse ones
        return nbytes


class Work:
    """What torch computed under a `WorkRecorder`: compute ops by name, and their bytes and FLOPs split into
    library ops (GEMMs, convolutions) and everything else, plus the bytes copied from the GPU to the host."""

    __slots__ = ("ops", "library_bytes", "library_flops", "other_bytes", "other_flops", "to_host_bytes", "calls", "library",
                 "converting")

    def __init__(self) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        self.library_bytes = self.library_flops = self.other_bytes = self.other_flops = self.to_host_bytes = 0
        self.calls = 0
        self.converting = 0  # inside a conversion the HostProbe counted: torch's own item() beneath it is not counted twice
        self.library: dict[str, list[int]] = {}  # library_family -> [bytes, flops]

    def to_json(self) -> dict[str, Any]:
        return {"ops": dict(self.ops), "library_bytes": self.library_bytes, "library_flops": self.library_flops,
                "other_bytes": self.other_bytes, "other_flops": self.other_flops, "to_host_bytes": self.to_host_bytes,
                "calls": self.calls, "library": {k: list(v) for k, v in self.library.items()}}


def work_seconds(nbytes: float, flops: float) -> float:
    """The nominal time of `nbytes` moved and `flops` computed (for shares of work, never shown as a time)."""
    return nbytes / NOMINAL_BYTES_PER_S + flops / NOMINAL_FLOPS_PER_S


class WorkRecorder(_Recorder):
    """Records the work torch does while active: every compute op with the bytes it touches and, for the ops
    torch's FLOP counter knows (GEMMs, convolutions, attention), its FLOPs. Memory moves, views and allocations
    are free; a copy from the GPU to the host is counted apart (work moved off the device)."""

    def __init__(self, work: Work | None = None) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.work = work or Work()
        self._flops = flop_registry
        seen = [0]  # a second count of the compute ops, where no attribute reaches it

        def bump() -> None:
            seen[0] += 1

        self._bump, self._seen = bump, (lambda: seen[0])

    def tampered(self) -> bool:
        """True when the record of the ops no longer adds up to the ops actually seen."""
        return sum(self.work.ops.values()) != self._seen()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        name = packet.__name__
        work = self.work
        if name in NON_COMPUTE_OPS:
            if name in ("_to_copy", "copy_", "copy", "to") and out is not None:
                self._to_host(args, out)
            elif name == "_local_scalar_dense" and args and isinstance(args[0], torch.Tensor) and not work.converting:
                # .item() and kin: one value to the host, on every device (red team 16: torch's own argument parser
                # reads a 0-dim tensor given as a size this way, byte by byte, out of the host probe's sight)
                work.to_host_bytes += args[0].element_size()
            return out
        work.ops[name] += 1
        self._bump()
        nbytes = sum(_tensor_bytes(t) for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor))
        counter = self._flops.get(packet)
        flops = int(counter(*args, **kwargs, out_val=out)) if counter is not None else 0
        if name in LIBRARY_OPS:
            work.library_bytes += nbytes
            work.library_flops += flops
            kind = work.library.setdefault(library_family(name), [0, 0])
            kind[0] += nbytes
            kind[1] += flops
        else:
            work.other_bytes += nbytes
            work.other_flops += flops
        return out

    def _to_host(self, args, out) -> None:
        sources = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.is_cuda]
        targets = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and not t.is_cuda]
        if sources and targets:
            self.work.to_host_bytes += sum(_tensor_bytes(t) for t in targets)


# Where torch's, Triton's and the judge's own code lives: a caller's file, which (unlike its module's __name__) a
# candidate cannot set without building code, which the audit refuses.
_LIBRARY_FOLDERS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, triton, sys.modules["pipeline"]) if getattr(m, "__file__", None))


class HostProbe:
    """Counts the bytes of tensors a call hands to the host as numpy or Python data (`Tensor.numpy`, `__array__`,
    `tolist`, `__dlpack__`, `item` and the conversions to Python numbers, printing), work no dispatch mode sees:
    installed before the snapshot, so the wrappers are themselves guarded. `work` is the Work of the call running
    now (None between calls)."""

    METHODS = ("numpy", "__array__", "tolist", "__dlpack__", "item", "__float__", "__int__", "__bool__", "__index__",
               "__complex__", "__repr__", "__str__", "__format__",
               # its bytes as Python integers, element by element (the sixth red team's softmax in pure Python);
               # every element through a Python callback
               "untyped_storage", "storage", "_typed_storage", "apply_", "map_", "map2_")

    def __init__(self) -> None:
        self.work: Work | None = None

    def install(self) -> None:
        for name in self.METHODS:
            original = getattr(torch.Tensor, name, None)
            if original is not None:
                setattr(torch.Tensor, name, self._wrap(original))

    STORAGE = frozenset({"untyped_storage", "storage", "_typed_storage"})

    def _wrap(self, original):
        probe = self
        storage = getattr(original, "__name__", "") in self.STORAGE

        def converted(tensor, *args, **kwargs):
            if probe.work is not None and isinstance(tensor, torch.Tensor):
                # storage reached by torch's, Triton's or the judge's own code (Triton's CPU interpreter copies every
                # argument through it: that is the kernel running) is no candidate reading bytes
                if not (storage and sys._getframe(1).f_code.co_filename.startswith(_LIBRARY_FOLDERS)):
                    work = probe.work
                    work.to_host_bytes += _tensor_bytes(tensor)
                    work.converting += 1
                    try:
                        return original(tensor, *args, **kwargs)
                    finally:
                        work.converting -= 1
            return original(tensor, *args, **kwargs)

        converted.__name__ = getattr(original, "__name__", "converted")
        return converted


class WatchGuards:
    """Notes when code inside a call turns off what lets the judge watch torch (the Python dispatch key, the stack
    of dispatch modes): torch's private switches, wrapped before the snapshot so the wrappers are guarded too.
    `active` is set only while the candidate's own code runs (our own recorder's entry and exit are outside it)."""

    C_NAMES = ("_DisableTorchDispatch", "_ExcludeDispatchKeyGuard", "_SetExcludeDispatchKeyGuard", "_ForceDispatchKeyGuard",
               "_IncludeDispatchKeyGuard", "_PreserveDispatchKeyGuard", "_DisablePythonDispatcher", "_unset_dispatch_mode",
               "_set_dispatch_mode", "_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack",
               "_dispatch_tls_set_dispatch_key_excluded", "_dispatch_tls_set_dispatch_key_included", "_RestorePythonTLSSnapshot",
               "_AutoDispatchBelowAutograd", "_AutoDispatchBelowADInplaceOrView")
    MODE_NAMES = ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily", "_push_mode")

    def __init__(self) -> None:
        self.active = False
        self.used: list[str] = []

    def install(self) -> None:
        from torch.utils import _python_dispatch

        for space, names, label in ((torch._C, self.C_NAMES, "torch._C"), (_python_dispatch, self.MODE_NAMES, "torch.utils._python_dispatch")):
            for name in names:
                original = getattr(space, name, None)
                if original is not None:
                    setattr(space, name, self._wrap(original, f"{label}.{name}"))

    def _wrap(self, original, label: str):
        guards = self

        def guarded(*args, **kwargs):
            if guards.active and label not in guards.used:
                guards.used.append(label)
            return original(*args, **kwargs)

        return guarded


def _namespaces() -> dict[str, object]:
    import torch.nn.functional as F
    import triton
    import triton.runtime.jit
    import triton.testing

    spaces = {
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch.nn.functional": F,
        "torch._C": torch._C,
        "time": time,
        "builtins": builtins,
        "triton": triton,
        "triton.testing": triton.testing,
        "triton.runtime.jit.JITFunction": triton.runtime.jit.JITFunction,
    }
    if torch.cuda.is_available():
        spaces.update({"torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event})
    return spaces


def judge_spaces() -> dict[str, object]:
    """The judge's own modules loaded in this process and the classes they define, the modules the worker still
    calls once candidate code has run (json, os, socket...), and Triton's launch and autotune classes."""
    import json
    import math
    import os
    import socket
    import statistics

    from torch.utils import _python_dispatch
    from triton.runtime import autotuner, interpreter

    spaces: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "pipeline" or name.startswith("pipeline.")):
            spaces[name] = module
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__ == name:
                    spaces[f"{name}.{attr}"] = value
    for module in (json, math, os, os.path, socket, statistics, threading, collections, _python_dispatch):
        spaces.setdefault(module.__name__, module)
    spaces.update({"threading.Thread": threading.Thread, "socket.socket": socket.socket,
                   "triton.runtime.autotuner.Autotuner": autotuner.Autotuner,
                   "triton.runtime.interpreter.InterpretedFunction": interpreter.InterpretedFunction})
    return spaces


def numeric_settings() -> dict[str, object]:
    """Process-wide precision switches; a candidate must not flip them (TF32 passes for fp32 only by luck)."""
    return {
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def hold_fp32_to_fp32() -> None:
    """Full fp32 in library ops (cuDNN defaults to TF32 for convolutions): set for reference and candidate alike."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


# Module state of the judge's that changes by design while a job runs (a calibration, a driver handle).
_JUDGE_STATE = frozenset({"pipeline.judge.timing._spin_cycles_per_ms", "pipeline.judge.devicemem._driver"})


def _snapshot_checker(spaces: dict[str, object], every_value: frozenset[str] = frozenset()) -> Callable[[], list[str]]:
    """A function that names every callable of `spaces` replaced or deleted since now (every value, for the spaces
    named in `every_value`). Its state lives in closure cells, and the builtins it uses are bound here: a candidate
    that patches `vars` or this module changes nothing it reads."""
    _vars, _list, _callable, _sorted = vars, list, callable, sorted
    live = {key: _vars(space) for key, space in spaces.items()}  # a module's dict, a class's live mappingproxy
    before = {key: {n: v for n, v in _list(ns.items()) if (key in every_value or _callable(v)) and f"{key}.{n}" not in _JUDGE_STATE}
              for key, ns in live.items()}
    wrapped = _dynamo_wrapped

    def changes() -> list[str]:
        changed = []
        for key, names in before.items():
            now = live[key]
            for name, value in names.items():
                current = now.get(name)
                if current is not value and not wrapped(f"{key}.{name}", value, current):
                    changed.append(f"{key}.{name}")
        return _sorted(changed)

    return changes


class NamespaceSnapshot:
    """The callables of the modules and classes a judge relies on, and the precision switches, to tell later
    whether any were replaced or flipped. `judge=True` adds egg's own modules and what the worker calls after a
    candidate's code has run (`judge_spaces`)."""

    def __init__(self, judge: bool = False) -> None:
        spaces = _namespaces()
        own: frozenset[str] = frozenset()
        if judge:
            extra = judge_spaces()
            spaces.update(extra)
            own = frozenset(k for k in extra if k.startswith("pipeline"))
        self._changes = _snapshot_checker(spaces, own)
        self._settings = numeric_settings()

    def changes(self) -> list[str]:
        """Dotted names whose object is no longer the one seen at the snapshot (replaced or deleted), and flipped
        precision switches."""
        changed = self._changes()
        changed += [f"{name} (now {value})" for name, value in numeric_settings().items() if value != self._settings[name]]
        return changed


_LAZY_DISABLE_CODE = torch._disable_dynamo(lambda: None).__code__  # the wrapper's code; making one imports nothing


def _dynamo_wrapped(name: str, before: object, now: object) -> bool:
    """Whether `now` is what importing torch._dynamo makes of `before`: it replaces `torch.manual_seed` with torch's
    own lazy dynamo-disable wrapper of the same function. Our probes no longer import it, so a candidate that does
    (torch.compile, a dispatch mode of its own) changes this one name, and that is torch's doing, not tampering.
    Only the genuine wrapper passes: torch's own code object, closed over the very function of the snapshot."""
    if name != "torch.manual_seed" or getattr(now, "__code__", None) is not _LAZY_DISABLE_CODE:
        return False
    cells = dict(zip(now.__code__.co_freevars, now.__closure__ or ()))
    return "fn" in cells and cells["fn"].cell_contents is before


class _RefuseJudgeImports:
    """A meta path finder: once the judge's modules are out of `sys.modules`, importing them again is refused."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pipeline" or name.startswith("pipeline."):
            raise ImportError(f"{name} is egg's judge: a candidate cannot import it")
        return None


def blind_judge_modules() -> None:
    """Take egg's modules out of `sys.modules` and refuse to import them again: the worker keeps its own
    references, and a candidate finds neither the judge's objects nor a way to load them."""
    for name in [n for n in sys.modules if n == "pipeline" or n.startswith("pipeline.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _RefuseJudgeImports())


def interpreter_autotune() -> None:
    """Under Triton's interpreter an autotuned kernel cannot benchmark ("0 active drivers"): each config is given
    the same time, so the first one is chosen (speed means nothing there), unless the candidate brought a
    benchmarker of its own (`do_bench=`)."""
    from triton.runtime.autotuner import Autotuner

    def do_bench(self):
        return self._do_bench or (lambda kernel_call, quantiles: [0.0] * len(quantiles))

    Autotuner.do_bench = property(do_bench)


def warm_up(device: torch.device) -> None:
    """Run the probes once on a trivial op, so torch's first-use work (dispatch tables, a device's first kernel) is
    done before the snapshot and before the clock, not inside a candidate's first call."""
    with OpRecorder():
        (torch.ones(2, device=device) + 1).sum()
    with WorkRecorder():
        (torch.ones(2, device=device) + 1).sum()
    if device.type == "cuda":
        torch.cuda.synchronize()


def live_threads() -> int:
    """Python threads alive now (a thread that outlives a call can finish its work after the clock stops)."""
    return threading.active_count()
