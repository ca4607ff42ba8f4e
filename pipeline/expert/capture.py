"""Capturing a problem's computation: the recording of `pipeline.expert.tape`, run in a child process with a clean
environment and a timeout (the problem is user code), cached by the problem's fingerprint.

The cache lives in `$EGG_CACHE/expert/` (default `~/.cache/egg/expert/`), one JSON file per problem source and torch
version; a session resumed in a new process finds the same capture, so the backend's answers stay the same.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.expert.graph import Tape, tape_from_json
from pipeline.problems.loader import fingerprint_text

CAPTURE_TIMEOUT_S = 180.0
FORMAT = 1  # bump when the recording's JSON changes


class CaptureError(RuntimeError):
    """The problem's forward could not be recorded; the message says why (one line, then the child's log tail)."""


@dataclass(frozen=True)
class Captured:
    fingerprint: str  # of the problem source
    tape: Tape


def cache_folder() -> Path:
    return Path(os.environ.get("EGG_CACHE") or "~/.cache/egg").expanduser() / "expert"


def _path(fingerprint: str) -> Path:
    return cache_folder() / f"{fingerprint[:24]}-{_torch_version()}-v{FORMAT}.json"


def capture(problem_source: str, *, timeout_s: float = CAPTURE_TIMEOUT_S, use_cache: bool = True) -> Captured:
    """The problem's tape, from the cache or a fresh child process. Raises CaptureError."""
    fingerprint = fingerprint_text(problem_source)
    path = _path(fingerprint)
    if use_cache and path.is_file():
        if not path.with_suffix(".py").is_file():
            _write(path.with_suffix(".py"), problem_source)
        return Captured(fingerprint, tape_from_json(json.loads(path.read_text())))
    data = _record(problem_source, timeout_s)
    if not data.get("ran_on"):
        errors = data.get("errors")
        why = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else "no reason given"
        raise CaptureError("the problem's forward could not be recorded: " + why[:4000])
    tape = _decoded(data)
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path.with_suffix(".py"), problem_source)  # stage 2 sees only kernels: it finds the problem here
        _write(path, json.dumps(data))
    return Captured(fingerprint, tape)


def capture_family(problem_sources: list[str], *, timeout_s: float = CAPTURE_TIMEOUT_S) -> list[Captured | None]:
    """Tapes of variants of one problem (its `get_inputs` cut to other sizes: pipeline.expert.general), those not
    cached recorded in one sandboxed child process: they are the same user code, so sharing a process exposes
    nothing one did not have already. None where a recording failed (never raises)."""
    _record_missing(problem_sources, timeout_s)
    found: list[Captured | None] = []
    for fingerprint in (fingerprint_text(s) for s in problem_sources):
        path = _path(fingerprint)
        try:
            found.append(Captured(fingerprint, tape_from_json(json.loads(path.read_text()))) if path.is_file() else None)
        except Exception:  # noqa: BLE001 - a cache entry that no longer reads: not captured
            found.append(None)
    return found


def forget(problem_source: str) -> None:
    """Drop a problem's capture from the cache (the next `capture` records it again)."""
    path = _path(fingerprint_text(problem_source))
    for stale in (path, path.with_suffix(".py")):
        stale.unlink(missing_ok=True)


def prime(problem_sources: list[str], *, timeout_s: float = CAPTURE_TIMEOUT_S) -> None:
    """Record every problem missing from the cache in one child process (one torch import for all of them). For
    trusted problem files only (the repository's suite and test fixtures): they share that process. A problem
    whose recording fails there is left for `capture`, which reports it on its own."""
    _record_missing(problem_sources, timeout_s)


def _record_missing(problem_sources: list[str], timeout_s: float) -> None:
    """The sources not in the cache, recorded in one child process (`timeout_s` each) and cached where they read
    as a tape."""
    missing = {fingerprint_text(s): s for s in problem_sources if not _path(fingerprint_text(s)).is_file()}
    if not missing:
        return
    from pipeline.judge import launcher

    with tempfile.TemporaryDirectory(prefix="egg-capture-") as folder:
        paths = []
        for index, source in enumerate(missing.values()):
            path = Path(folder) / f"problem_{index}.py"
            path.write_text(source, encoding="utf-8")
            paths.append(str(path))
        spec, out = Path(folder) / "spec.json", Path(folder) / "tapes.json"
        spec.write_text(json.dumps({"problem_paths": paths}))
        finished = launcher.run("pipeline.expert.tape", [str(spec), str(out)], workdir=folder, timeout_s=timeout_s * len(paths))
        written = launcher.read_job_json(out) if finished.error is None else None
        results = written.get("results") if isinstance(written, dict) else None
        if not isinstance(results, list):
            return
    cache_folder().mkdir(parents=True, exist_ok=True)
    for (fingerprint, source), data in zip(missing.items(), results):
        if isinstance(data, dict) and data.get("ran_on") and _decodes(data):  # only what reads as a tape is cached
            _write(_path(fingerprint).with_suffix(".py"), source)
            _write(_path(fingerprint), json.dumps(data))


def _decoded(data: dict) -> Tape:
    """The tape the capture's child wrote (user code ran there: what does not read as a tape is a CaptureError)."""
    try:
        return tape_from_json(data)
    except Exception as exc:
        raise CaptureError(f"the capture wrote no result that reads as one ({type(exc).__name__})") from None


def _decodes(data: dict) -> bool:
    try:
        _decoded(data)
        return True
    except CaptureError:
        return False


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)  # atomic: a concurrent session never reads half a file


def cached(fingerprint: str) -> tuple[Captured, str] | None:
    """A capture made earlier for the problem with this fingerprint, with the problem's source (rewrites only see
    the kernel's source and its record)."""
    path = _path(fingerprint)
    if not path.is_file() or not path.with_suffix(".py").is_file():
        return None
    source = path.with_suffix(".py").read_text(encoding="utf-8")
    if fingerprint_text(source) != fingerprint:
        return None
    return Captured(fingerprint, tape_from_json(json.loads(path.read_text()))), source


def _record(problem_source: str, timeout_s: float) -> dict:
    """Run the problem's forward on meta tensors in the judge's sandbox (the problem is user code: a pasted one may
    do anything at import), on the CPU: the capture never touches a GPU."""
    from pipeline.judge import launcher

    with tempfile.TemporaryDirectory(prefix="egg-capture-") as folder:
        problem, spec, out = (Path(folder) / name for name in ("problem.py", "spec.json", "tape.json"))
        problem.write_text(problem_source, encoding="utf-8")
        spec.write_text(json.dumps({"problem_path": str(problem)}))
        finished = launcher.run("pipeline.expert.tape", [str(spec), str(out)], workdir=folder, timeout_s=timeout_s)
        written = launcher.read_job_json(out) if finished.error is None else None
        if isinstance(written, dict):
            return written
        tail = finished.log_tail[-1500:].strip()
    error = f"the capture {finished.error}" if finished.error else "the capture wrote no result that reads as one"
    raise CaptureError(f"{error}{': ' + tail if tail else ''}")


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch").split("+")[0]
    except PackageNotFoundError:
        return "unknown"
