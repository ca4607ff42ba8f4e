"""Static facts of Triton kernels compiled for the H200 (sm_90) on any machine, GPU or not.

Triton compiles to PTX and cubin without a driver; the wheel ships `ptxas` and `cuobjdump`, so registers, local
memory (spills), shared memory and the use of wgmma/TMA are known before any GPU time is spent. The tuning engine
prunes configurations with `compile_sm90`/`facts_for_call`; `candidate_static_facts` surveys a whole candidate.

Imports: triton and the standard library only (the survey subprocess and the GPU machine use this module too).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SM90 = ("cuda", 90, 32)  # backend, compute capability, warp size
# H200 (sm_90) per-block and per-thread limits a configuration must respect to launch at all.
MAX_SHARED_BYTES_PER_BLOCK = 232_448  # dynamic + static, without the reserved 1 KiB below
# The driver reserves 1 KiB of shared memory for every block on sm_80+ (NCU: launch__shared_mem_per_block_driver).
# An sm_90 kernel that uses shared memory links that window (`.nv.reservedSmem`), so ptxas sizes its
# `.nv.shared.<kernel>` section to cover it and cuobjdump counts it as static shared; it is the same 1 KiB.
RESERVED_SHARED_BYTES_PER_BLOCK = 1_024
MAX_REGISTERS_PER_THREAD = 255
_RESOURCE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


class StaticCompileError(Exception):
    """A configuration that Triton (or ptxas) refused to compile for sm_90; the message says why."""


@dataclass(frozen=True)
class StaticFacts:
    """One compiled kernel configuration, for sm_90. Frozen, but not hashable (`constexprs` is a dict)."""

    kernel: str
    num_warps: int
    num_stages: int
    constexprs: dict[str, int | float | bool | str]
    registers: int  # per thread, as ptxas allocated them
    spilled_bytes: int  # local memory per thread (register spills, and local arrays if any)
    shared_bytes: int  # per block, dynamic + static as NCU counts them: without the 1 KiB the driver reserves
    uses_wgmma: bool  # Hopper warp-group MMA (the tensor cores' fast path on sm_90)
    uses_tma: bool  # the bulk tensor copy engine (cp.async.bulk.tensor)
    binary_sha256: str  # of the cubin: identical configurations compile to the same binary
    compile_s: float  # wall time of the compile (near 0 when Triton's own cache already had it)

    @property
    def threads(self) -> int:
        return self.num_warps * 32

    def launch_problems(self) -> tuple[str, ...]:
        """Reasons this configuration cannot launch, or will run badly, on an H200 (empty when none)."""
        problems = []
        if self.shared_bytes > MAX_SHARED_BYTES_PER_BLOCK:
            problems.append(f"needs {self.shared_bytes:,} B of shared memory per block; the H200 allows {MAX_SHARED_BYTES_PER_BLOCK:,} B")
        if self.spilled_bytes:
            problems.append(f"spills: {self.spilled_bytes} B of local memory per thread at {self.registers} registers")
        return tuple(problems)


def compile_sm90(
    fn: Any, signature: dict[str, str], constexprs: dict[str, object], *, num_warps: int = 4, num_stages: int = 3
) -> StaticFacts:
    """Compile `fn` (a `triton.jit` function) for sm_90 and read its resources.

    `signature` types the runtime arguments (`{"x_ptr": "*fp32", "n": "i32"}`); constexpr arguments go in
    `constexprs` only. No pointer-alignment or integer specialization is assumed (use `facts_for_call` to get
    exactly what a launch with given arguments compiles to). Raises StaticCompileError.
    """
    jit = _jit_function(fn)
    missing = [name for name in jit.arg_names if name not in constexprs and name not in signature]
    if missing:
        raise StaticCompileError(f"{jit.__name__}: no type or value for {', '.join(missing)}")
    full_signature = {name: ("constexpr" if name in constexprs else signature[name]) for name in jit.arg_names}
    options = {"num_warps": num_warps, "num_stages": num_stages}
    return _compile(jit, full_signature, {(jit.arg_names.index(k),): v for k, v in constexprs.items()}, {}, options)


def facts_for_call(fn: Any, args: tuple, kwargs: dict, *, num_warps: int = 4, num_stages: int = 3) -> StaticFacts:
    """What launching `fn[grid](*args, **kwargs)` on an H200 would compile, derived from example arguments.

    Tensors (any device, `meta` included) become typed pointers, ints become i32/i64 (or constexpr 1), and
    alignment of pointers and integers is specialized the way Triton's own launcher does it. `num_warps` and
    `num_stages` in `kwargs` win over the keyword defaults. Raises StaticCompileError.
    """
    return compile_specialization(specialize(fn, args, kwargs, num_warps=num_warps, num_stages=num_stages))


@dataclass(frozen=True)
class Specialization:
    """What Triton's launcher would compile for one call: the argument types, constants, attributes, options."""

    jit: Any
    signature: dict[str, str]
    constexprs: dict[tuple, Any]
    attrs: dict[tuple, Any]
    options: dict[str, Any]

    def key(self) -> str:
        """Equal for calls that compile to the same kernel (so each distinct one is compiled once)."""
        parts = (id(self.jit), sorted(self.signature.items()), sorted(self.constexprs.items()), sorted(self.attrs.items()))
        return repr((parts, sorted((k, repr(v)) for k, v in self.options.items())))


def specialize(fn: Any, args: tuple, kwargs: dict, *, num_warps: int = 4, num_stages: int = 3) -> Specialization:
    """Bind example arguments the way `fn[grid](*args, **kwargs)` would on an sm_90 device. Cheap (no compile)."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    jit = _jit_function(fn)
    backend = make_backend(GPUTarget(*SM90))
    call_kwargs = {"num_warps": num_warps, "num_stages": num_stages, **kwargs}
    call_kwargs.setdefault("debug", jit.debug or knobs.runtime.debug)
    call_kwargs.setdefault("instrumentation_mode", knobs.compilation.instrumentation_mode)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    try:
        bound, specialization, options = binder(*args, **call_kwargs)
        # The launcher's own packing (a private method, but the one place that knows Triton's rules).
        options, signature, constexprs, attrs = jit._pack_args(backend, call_kwargs, bound, specialization, options)
    except (TypeError, KeyError, ValueError, AssertionError) as exc:
        raise StaticCompileError(f"{jit.__name__}: cannot bind the arguments: {exc}") from exc
    return Specialization(jit, signature, constexprs, attrs, options.__dict__)


def compile_specialization(spec: Specialization) -> StaticFacts:
    """Compile one specialization for sm_90 and read its resources. Raises StaticCompileError."""
    return _compile(spec.jit, spec.signature, spec.constexprs, spec.attrs, spec.options)


def _jit_function(fn: Any) -> Any:
    """The JITFunction under autotune/heuristics wrappers (rebuilt from the Python function if interpreted)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(fn, (JITFunction, InterpretedFunction)) and hasattr(fn, "fn") and seen < 8:
        fn, seen = fn.fn, seen + 1
    if isinstance(fn, InterpretedFunction):  # under TRITON_INTERPRET=1 `triton.jit` returns these
        return JITFunction(fn.fn)
    if not isinstance(fn, JITFunction):
        raise StaticCompileError(f"{fn!r} is not a triton.jit function")
    return fn


def _compile(jit: Any, signature: dict, constexprs: dict, attrs: dict, options: dict) -> StaticFacts:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    start = time.perf_counter()
    try:
        compiled = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=GPUTarget(*SM90), options=options)
    except Exception as exc:  # Triton's CompilationError, PTXASError, and assertion failures alike
        raise StaticCompileError(f"{jit.__name__}: {type(exc).__name__}: {_first_lines(str(exc))}") from exc
    compile_s = time.perf_counter() - start
    cubin, ptx = compiled.asm["cubin"], compiled.asm["ptx"]
    registers, spilled, static_shared = resource_usage(cubin)
    names = jit.arg_names
    return StaticFacts(
        kernel=jit.__name__,
        num_warps=compiled.metadata.num_warps,
        num_stages=compiled.metadata.num_stages,
        constexprs={names[path[0]]: _plain(v) for path, v in constexprs.items() if len(path) == 1},
        registers=registers,
        spilled_bytes=spilled,
        shared_bytes=compiled.metadata.shared + static_shared,
        uses_wgmma="wgmma.mma_async" in ptx,
        uses_tma="cp.async.bulk.tensor" in ptx,
        binary_sha256=hashlib.sha256(cubin).hexdigest(),
        compile_s=round(compile_s, 4),
    )


def resource_usage(cubin: bytes) -> tuple[int, int, int]:
    """(registers per thread, local bytes per thread, static shared bytes) of a single-kernel cubin. The static
    shared bytes leave out the driver's reserved window, which cuobjdump counts when the kernel uses shared memory
    (NCU's launch__shared_mem_per_block_static does not: on the H200 a Triton GEMM shows 147,456 B dynamic, 0 static,
    1,024 driver, 148,480 allocated; cuobjdump says SHARED:1024)."""
    from triton import knobs

    with tempfile.TemporaryDirectory(prefix="egg-cubin-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=60, check=False
        )
    match = _RESOURCE.search(out.stdout)
    if out.returncode != 0 or match is None:
        raise StaticCompileError(f"cuobjdump could not read the cubin: {_first_lines(out.stderr or out.stdout)}")
    registers, stack, shared, local = map(int, match.groups())
    return registers, max(local, stack), max(0, shared - RESERVED_SHARED_BYTES_PER_BLOCK)


def _plain(value: Any) -> int | float | bool | str:
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def _first_lines(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:lines] if line.strip())


def candidate_static_facts(candidate_path: str | Path, problem_path: str | Path) -> list[StaticFacts]:
    """Every distinct kernel configuration the candidate launches on the problem's inputs, compiled for sm_90.

    The candidate runs in a subprocess (its code is untrusted) on `meta` tensors: its launches are intercepted,
    never executed. See `pipeline.profiler.survey` for launch counts, grids and what went wrong, as data.
    """
    from pipeline.profiler.survey import survey_candidate

    return [launch.facts for launch in survey_candidate(candidate_path, problem_path).launches]
