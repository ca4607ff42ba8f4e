"""Run-time probes the worker installs before a candidate's code is imported.

Imported by the worker: torch, triton and the standard library only.
"""

from __future__ import annotations

import collections
import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that move, view or allocate memory without computing anything: a candidate may keep these in torch.
NON_COMPUTE_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
    full full_like new_full fill fill_ zero zero_ scalar_tensor arange lift_fresh lift_fresh_copy detach alias
    view _unsafe_view view_as reshape _reshape_alias permute transpose transpose_ t t_ expand expand_as contiguous
    clone copy copy_ _to_copy to as_strided slice select squeeze squeeze_ unsqueeze unsqueeze_ split split_with_sizes
    chunk unbind flatten unflatten narrow resize_ set_ stride size sym_size sym_stride sym_numel numel is_contiguous
    _local_scalar_dense item movedim movedim permute_copy view_copy index_select_backward dim type_as
    """.split()
)


class LaunchCounter:
    """Counts launches of Triton kernels (compiled or interpreted), per kernel name.

    It wraps `run` on Triton's kernel classes, the one method every launch goes through (autotuned ones too).
    """

    def __init__(self, source_file: str | None = None) -> None:
        self.source_file = source_file
        self.counts: collections.Counter[str] = collections.Counter()
        self._installed: list[tuple[type, object]] = []

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

    def total(self) -> int:
        return sum(self.counts.values())

    def own_total(self) -> int:
        """Launches of kernels defined in the candidate's own file."""
        return sum(n for name, n in self.counts.items() if "." not in name)


class OpRecorder(TorchDispatchMode):
    """Records the aten compute ops (by packet name) that run while it is active.

    torch wraps a mode's `__torch_dispatch__` in its lazy dynamo-disable, whose first call imports torch._dynamo:
    seconds on a cold host, on the critical path of every fresh worker. This mode never runs under torch.compile's
    tracing, so it opts out (`_should_skip_dynamo`; torch versions without the hook never wrapped it).
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in NON_COMPUTE_OPS:
            self.ops.add(name)
        return func(*args, **(kwargs or {}))


def _namespaces() -> dict[str, object]:
    import builtins

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


class NamespaceSnapshot:
    """The callables of the modules and classes a judge relies on, and the precision switches, to tell later
    whether any were replaced or flipped."""

    def __init__(self) -> None:
        self._before = {key: self._callables(space) for key, space in _namespaces().items()}
        self._settings = numeric_settings()

    @staticmethod
    def _callables(space: object) -> dict[str, object]:
        # The objects themselves are kept (not their ids), so a replaced one cannot be mistaken for a new one.
        return {name: value for name, value in list(vars(space).items()) if callable(value)}

    def changes(self) -> list[str]:
        """Dotted names whose object is no longer the one seen at the snapshot (replaced or deleted)."""
        changed = []
        for key, space in _namespaces().items():
            now = vars(space)
            for name, value in self._before.get(key, {}).items():
                if now.get(name) is not value and not _dynamo_wrapped(f"{key}.{name}", value, now.get(name)):
                    changed.append(f"{key}.{name}")
        changed += [f"{name} (now {value})" for name, value in numeric_settings().items() if value != self._settings[name]]
        return sorted(changed)


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


def warm_up(device: torch.device) -> None:
    """Run the probes once on a trivial op, so torch's first-use work (dispatch tables, a device's first kernel) is
    done before the snapshot and before the clock, not inside a candidate's first call."""
    with OpRecorder():
        (torch.ones(2, device=device) + 1).sum()
    if device.type == "cuda":
        torch.cuda.synchronize()


def live_threads() -> int:
    """Python threads alive now (a thread that outlives a call can finish its work after the clock stops)."""
    return threading.active_count()
