"""Pruning before the GPU: compile configurations for sm_90 on CPU cores, in parallel, and drop the hopeless.

`PrunedEvaluator` wraps the device evaluator: each batch is compiled first (a pool of processes in the judge's
sandbox: they import the kernel file);
configurations that fail to compile, spill registers, or need more shared memory than an H200 block may have are
answered without device time; one that compiles to the same binary as a configuration already measured gets that
configuration's outcome (`duplicate_binary`, tinygrad's lesson). Only the rest reach the device.

The compiler is a small protocol, so tests use a scripted one; `Sm90Compiler` is the real one, built on
`pipeline.profiler.static.facts_for_call` (Triton's compiler with ptxas and cuobjdump from the wheel, no GPU needed).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import pickle
import select
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pipeline.tuning.measurement import Evaluator, Measurement, TuneStatus
from pipeline.tuning.recipe import LaunchRecipe, materialize
from pipeline.tuning.space import Config

H200_SHARED_BYTES_PER_BLOCK = 232_448


@dataclass(frozen=True)
class BinaryFacts:
    """What compiling one configuration told us. `launch_sha256` identifies the launch: binary and grid together
    (two configurations with equal binaries but different grids are different launches)."""

    registers: int
    spilled_bytes: int
    shared_bytes: int
    launch_sha256: str
    uses_wgmma: bool = False
    uses_tma: bool = False


class Compiler(Protocol):
    """Compiles one configuration; raises on a compile error (the pruner turns that into a status)."""

    def compile(self, config: Config) -> BinaryFacts: ...


@dataclass(frozen=True)
class Compiled:
    """The pruner's view of one configuration: facts, or why it failed to compile."""

    facts: BinaryFacts | None
    error: str = ""


def compile_quietly(compiler: Compiler, config: Config) -> Compiled:
    """Compile, turning any failure into data (this runs in a pool process: exceptions must not cross back)."""
    try:
        return Compiled(compiler.compile(config))
    except Exception as exc:  # Triton raises many types; each is just a failed configuration here
        return Compiled(None, f"{type(exc).__name__}: {exc}"[:2000])


COMPILE_TIMEOUT_S = 600.0  # one configuration's compile in a pool worker, at most
PIPE_ROUND_BYTES = 32 << 10  # tasks sent to a worker at once: under a pipe's 64 KiB, so the write never blocks


class JailedPool:
    """Compile processes in the judge's sandbox (pipeline.judge.launcher), each `python -m
    pipeline.tuning.compile_worker`: they import kernel files, user code. Tasks go to them round robin over their
    stdin; answers come back as JSON lines, read with a deadline. A compiler names what its work reads
    (`read_only()`: the kernel file); the file that defines the compiler's class is readable too. A worker that
    dies, hangs or writes what is not an answer fails its tasks, as data, and is replaced next time."""

    def __init__(self, workers: int, timeout_s: float = COMPILE_TIMEOUT_S) -> None:
        self.size, self.timeout_s = max(1, workers), timeout_s
        self._folder: str | None = None
        self._workers: list[Any] = []  # launcher.Started
        self._paths: tuple[str, ...] = ()
        self._last_logs = ""

    def map(self, compiler: Compiler, configs: Sequence[Config]) -> list[Compiled]:
        self._start(_readable(compiler))
        answers: list[Compiled | None] = [None] * len(configs)
        tasks = [base64.b64encode(pickle.dumps((i, compiler, config))) + b"\n" for i, config in enumerate(configs)]
        owners = {w: list(range(w, len(configs), len(self._workers))) for w in range(len(self._workers))}
        failed = ""
        # in rounds: each worker gets what fits its empty pipe, and the round's answers are read before the next,
        # so no write can block on a worker that stopped reading (a kernel file that hangs at import)
        pending = {w: bytearray() for w in owners}
        alive = set(owners)
        while alive and any(owners[w] for w in alive):
            sent: dict[int, list[int]] = {}
            for w in sorted(alive):
                batch, size = [], 0
                while owners[w] and (not batch or size + len(tasks[owners[w][0]]) <= PIPE_ROUND_BYTES):
                    batch.append(owners[w].pop(0))
                    size += len(tasks[batch[-1]])
                try:
                    self._workers[w].process.stdin.write(b"".join(tasks[i] for i in batch))
                    self._workers[w].process.stdin.flush()
                except OSError:
                    pass  # it died: its tasks fail below
                sent[w] = batch
            for w, batch in sent.items():
                for _ in batch:
                    line, timed_out = _read_line(self._workers[w].process.stdout.fileno(), pending[w], self.timeout_s)
                    answer = _answer(line, batch)
                    if answer is None:  # ended, hung, or wrote what is not an answer (the kernel's code shares the process)
                        failed = failed or ("timed out" if timed_out else "died")
                        alive.discard(w)
                        break
                    answers[answer[0]] = answer[1]
        died = [i for i, a in enumerate(answers) if a is None]
        if died:
            tail = self._log_tail()
            self.close()  # a fresh set next time
            what = f"timed out after {self.timeout_s:g} s" if failed == "timed out" else "died"
            for i in died:
                answers[i] = Compiled(None, f"the compile worker {what}{': ' + tail if tail else ''}"[:2000])
        return answers  # type: ignore[return-value]

    def _start(self, paths: tuple[str, ...]) -> None:
        if self._workers and paths == self._paths and all(w.process.poll() is None for w in self._workers):
            return
        self.close()
        from pipeline.judge import launcher

        self._folder, self._paths = tempfile.mkdtemp(prefix="egg-compile-"), paths
        for k in range(self.size):
            workdir = os.path.join(self._folder, str(k))
            os.makedirs(workdir)
            self._workers.append(launcher.start("pipeline.tuning.compile_worker", workdir=workdir, read_only=paths,
                                                device="cuda", environment={"CUDA_VISIBLE_DEVICES": ""}))

    def _log_tail(self) -> str:
        """The end of each worker's log (the launcher keeps them out of the workers' reach)."""
        if not self._workers:
            return self._last_logs
        return " | ".join(t for t in (w.log_tail(600).strip() for w in self._workers) if t)

    def close(self) -> None:
        if self._workers:
            self._last_logs = self._log_tail()
        for worker in self._workers:
            worker.close()
        self._workers = []
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


MAX_ANSWER_BYTES = 1 << 16


def _answer(line: bytes, tasks: list[int]) -> tuple[int, Compiled] | None:
    """(task index, outcome) from one line of a compile worker, or None when the line is not an answer to one of
    its tasks: the worker then counts as dead, its unanswered tasks failed."""
    if not line or len(line) > MAX_ANSWER_BYTES:
        return None
    from pipeline.judge.launcher import job_json

    try:
        answer = job_json(line)
        index, facts = int(answer["index"]), answer.get("facts")
        if index not in tasks:
            return None
        if facts is None:
            return index, Compiled(None, str(answer.get("error", ""))[:2000])
        fields = {f.name: f.type for f in dataclasses.fields(BinaryFacts)}
        if set(facts) != set(fields):
            return None
        return index, Compiled(BinaryFacts(**{k: (bool(v) if fields[k] == "bool" else str(v) if fields[k] == "str" else int(v)) for k, v in facts.items()}))
    except Exception:  # deep nesting, NaN, a wrong type: not an answer
        return None


def _read_line(fd: int, pending: bytearray, timeout_s: float) -> tuple[bytes, bool]:
    """(the next line, whether the wait ran out) from a worker's descriptor, never waiting past `timeout_s` nor
    holding more than one answer's bytes: b"" when it ended, went quiet or wrote an over-long line."""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in pending:
        if len(pending) > MAX_ANSWER_BYTES:
            return b"", False
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"", True
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"", False
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line + b"\n", False


def _readable(compiler: Compiler) -> tuple[str, ...]:
    """What a compile worker must read: the compiler's own files, and the module that defines its class (a
    scripted compiler of a test; egg's own package is always there)."""
    paths = list(getattr(compiler, "read_only", lambda: ())())
    module = sys.modules.get(type(compiler).__module__)
    source = getattr(module, "__file__", None)
    if source and not type(compiler).__module__.startswith("pipeline."):
        paths.append(os.path.abspath(source))
    return tuple(sorted(set(paths)))


class PrunedEvaluator:
    """Compiles each batch on CPU cores and measures only configurations worth device time."""

    def __init__(self, inner: Evaluator, compiler: Compiler, *, workers: int = 2,
                 shared_limit_bytes: int = H200_SHARED_BYTES_PER_BLOCK, allow_spills: bool = False,
                 compile_timeout_s: float = COMPILE_TIMEOUT_S) -> None:
        self.inner, self.compiler, self.workers, self.compile_timeout_s = inner, compiler, workers, compile_timeout_s
        self.shared_limit_bytes, self.allow_spills = shared_limit_bytes, allow_spills
        self.outcomes: dict[str, Measurement] = {}  # launch sha256 -> the measured configuration's outcome
        self.facts: dict[str, BinaryFacts] = {}  # config key -> facts
        self._pool: JailedPool | None = None

    def compile_all(self, configs: Sequence[Config]) -> list[Compiled]:
        """Compile `configs`: a compiler that reads user code (it names files in `read_only()`: the real one imports
        the kernel file) always in the sandboxed pool, even for one configuration; a scripted one here."""
        if not configs:
            return []
        if not getattr(self.compiler, "read_only", lambda: ())() and (self.workers <= 1 or len(configs) <= 1):
            return [compile_quietly(self.compiler, c) for c in configs]
        if self._pool is None:
            self._pool = JailedPool(self.workers, self.compile_timeout_s)
        return self._pool.map(self.compiler, configs)

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        results: dict[str, Measurement] = {}
        survivors: list[Config] = []
        twins: dict[str, str] = {}  # config key -> launch sha256 of an earlier configuration
        pending: set[str] = set()
        for config, compiled in zip(configs, self.compile_all(configs)):
            verdict = self._verdict(config, compiled)
            if verdict is not None:
                results[config.key] = verdict
                continue
            launch = compiled.facts.launch_sha256
            self.facts[config.key] = compiled.facts
            if launch in self.outcomes or launch in pending:
                twins[config.key] = launch
            else:
                pending.add(launch)
                survivors.append(config)
        for measurement in self.inner.evaluate(survivors) if survivors else []:
            results[measurement.config.key] = measurement
            self.outcomes[self.facts[measurement.config.key].launch_sha256] = measurement
        for key, launch in twins.items():
            results[key] = _duplicate(Config.from_key(key), self.outcomes[launch])
        return [results[c.key] for c in configs]

    def _verdict(self, config: Config, compiled: Compiled) -> Measurement | None:
        """A status from compiling alone, or None when the configuration deserves the device."""
        facts = compiled.facts
        if facts is None:
            return Measurement(config, TuneStatus.COMPILE_ERROR, detail=compiled.error, measured=False)
        if facts.shared_bytes > self.shared_limit_bytes:
            return Measurement(config, TuneStatus.SHARED_OVERFLOW, measured=False,
                               detail=f"{facts.shared_bytes} B of shared memory per block > {self.shared_limit_bytes} B")
        if facts.spilled_bytes > 0 and not self.allow_spills:
            return Measurement(config, TuneStatus.SPILLS, measured=False,
                               detail=f"{facts.spilled_bytes} B spilled per thread at {facts.registers} registers")
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> PrunedEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duplicate(config: Config, twin: Measurement) -> Measurement:
    """The outcome of a configuration whose launch is identical to `twin`'s: the twin's time, no device time."""
    detail = f"same binary and grid as {twin.config.key} ({twin.status.value})"
    return replace(twin, config=config, status=TuneStatus.DUPLICATE_BINARY, measured=False, twin=twin.config.key,
                   detail=detail, time_ms=twin.time_ms if twin.ok else None)


# The real compiler ------------------------------------------------------------------------------------------------

_KERNELS: dict[tuple[str, str], Any] = {}  # per process: each pool worker loads a kernel file once
SANDBOXED = False  # set by pipeline.tuning.compile_worker, in the sandbox: the only place a kernel file is imported


@dataclass(frozen=True)
class Sm90Compiler:
    """Compiles configurations of one launch recipe for the H200 with `pipeline.profiler.static` (no GPU needed).

    Arguments are the recipe's, with tensors of 16 elements: what Triton compiles depends on dtypes, scalar
    values and pointer alignment, not on how much memory lies behind a pointer.
    """

    kernel_path: str
    recipe: LaunchRecipe

    def read_only(self) -> tuple[str, ...]:
        return (os.path.abspath(self.kernel_path),)

    def compile(self, config: Config) -> BinaryFacts:
        from pipeline.profiler.static import facts_for_call

        if not SANDBOXED:
            raise RuntimeError("Sm90Compiler imports a kernel file (user code): it runs only in a sandboxed compile worker")
        kernel = self._kernel()
        args = materialize(self.recipe, "cpu", small=True)
        merged = {**self.recipe.constexprs, **config}
        num_warps, num_stages = merged.pop("num_warps", 4), merged.pop("num_stages", 3)
        # Constexprs and the other launch options (num_ctas, maxnreg) travel as keywords, as in a launch.
        facts = facts_for_call(kernel, tuple(args.values()), merged, num_warps=num_warps, num_stages=num_stages)
        grid = self.recipe.grid_for(config)
        launch = hashlib.sha256(f"{facts.binary_sha256}:{json.dumps(grid)}".encode()).hexdigest()
        return BinaryFacts(facts.registers, facts.spilled_bytes, facts.shared_bytes, launch, facts.uses_wgmma, facts.uses_tma)

    def _kernel(self) -> Any:
        key = (self.kernel_path, self.recipe.kernel)
        if key not in _KERNELS:
            from pipeline.tuning.worker import load_kernel

            _KERNELS[key] = load_kernel(self.kernel_path, self.recipe.kernel)
        return _KERNELS[key]
