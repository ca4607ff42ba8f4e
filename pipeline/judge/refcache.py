"""The reference cache: what a problem's reference run gave, kept on disk so no later check runs it again.

An entry holds the reference's facts (output structure, input checksums, compute ops, FLOPs and bytes, the eager
and torch.compile baselines, the copy bandwidth the physical floor uses, the degeneracy verdict, which input sets
the checks use) and, when they are small (`max_output_bytes`), its outputs for every input set. Larger outputs are
not worth the disk: a fresh reference worker recomputes them on the GPU in about a second, while the candidate's
worker starts.

The key is everything the reference depends on: the problem's content fingerprint, every option that shapes the
reference run, the environment (Python, torch, triton, numpy, and on a GPU its name, memory, CUDA and driver
versions) and the source of the judge's own worker code. A change to any of them is a miss. Entries are written
to a temporary folder and renamed into place, so a reader sees a whole entry or none; each carries a checksum of
its facts and of each output file, so a corrupt or truncated one is dropped and recomputed. The cache folder is
egg's (mode 0700) and lies outside every job's view (pipeline.judge.isolation), so no candidate can read or write it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SCHEMA = 1
DEFAULT_MAX_OUTPUT_BYTES = 256 << 20
# Options that never change what the reference computes (the candidate's timeouts, how its outputs are subsampled).
_CANDIDATE_ONLY_OPTIONS = frozenset({"compile_timeout_s", "run_timeout_s", "repeat_calls", "subsample_above"})
_JUDGE_SOURCES = ("worker.py", "timing.py", "probes.py", "compare.py", "tensorfile.py", "refcache.py")


@dataclass
class Entry:
    """One cached reference: `facts` (JSON data) and, if they were small enough, `outputs` (CPU tensors)."""

    facts: dict[str, Any]
    outputs: dict[str, list[torch.Tensor]] | None


def environment_fingerprint(device: str) -> dict[str, str]:
    """What the reference's numbers depend on, beyond the problem and the options (versions read from the installed
    packages' metadata: importing triton here would cost a second of every check)."""
    env = {"python": platform.python_version(), "machine": platform.machine(), "torch": torch.__version__,
           "triton": _version("triton"), "numpy": _version("numpy"), "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory=str(props.total_memory),
                   sms=str(props.multi_processor_count), cuda=str(torch.version.cuda), driver=_driver_version(),
                   visible=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    return env


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _driver_version() -> str:
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip()
    except OSError:
        return str(torch._C._cuda_getDriverVersion())


@functools.lru_cache(maxsize=1)
def judge_code_fingerprint() -> str:
    """The judge's worker code as it is now: a change to how references are run invalidates every entry."""
    folder = Path(__file__).parent
    digest = hashlib.sha256(str(SCHEMA).encode())
    for name in _JUDGE_SOURCES:
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def cache_key(problem_fingerprint: str, options: Any, environment: dict[str, str]) -> str:
    """The entry's name: a hash of everything the reference run depends on."""
    shaping = {k: v for k, v in sorted(dataclasses.asdict(options).items()) if k not in _CANDIDATE_ONLY_OPTIONS}
    material = {"schema": SCHEMA, "problem": problem_fingerprint, "options": shaping, "environment": environment,
                "judge": judge_code_fingerprint()}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class ReferenceCache:
    """Entries under `folder` (created 0700); `folder=None` keeps nothing."""

    def __init__(self, folder: str | os.PathLike | None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.max_output_bytes = max_output_bytes
        if self.folder is not None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.folder, 0o700)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def load(self, key: str) -> Entry | None:
        """The entry, or None (missing, or corrupt: then it is removed and will be recomputed)."""
        if self.folder is None:
            return None
        path = self._path(key)
        if not path.is_dir():
            return None
        try:
            return self._read(path, key)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _warn(f"dropping a corrupt reference cache entry {path.name[:12]} ({exc})")
            shutil.rmtree(path, ignore_errors=True)
            return None

    def _read(self, path: Path, key: str) -> Entry:
        record = json.loads((path / "entry.json").read_text())
        body = record["body"]
        if record["digest"] != _digest(body) or body["key"] != key or body["schema"] != SCHEMA:
            raise ValueError("checksum or key mismatch")
        outputs = None
        if body["outputs"] is not None:
            outputs = {name: [_load_tensor(path, e) for e in entries] for name, entries in body["outputs"].items()}
        return Entry(body["facts"], outputs)

    def store(self, key: str, facts: dict[str, Any], outputs: dict[str, list[torch.Tensor]] | None) -> bool:
        """Write an entry (outputs only if they fit `max_output_bytes`). False if nothing was written."""
        if self.folder is None:
            return False
        if outputs is not None and sum(t.numel() * t.element_size() for ts in outputs.values() for t in ts) > self.max_output_bytes:
            outputs = None
        final = self._path(key)
        final.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.folder))
        try:
            saved = None
            if outputs is not None:
                saved = {name: [_save_tensor(tmp, f"{i}_{j}.bin", t) for j, t in enumerate(ts)] for i, (name, ts) in enumerate(outputs.items())}
            body = {"schema": SCHEMA, "key": key, "facts": facts, "outputs": saved}
            (tmp / "entry.json").write_text(json.dumps({"digest": _digest(body), "body": body}))
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
            return True
        except OSError as exc:
            _warn(f"could not write the reference cache entry ({exc}); the next check runs the reference again")
            shutil.rmtree(tmp, ignore_errors=True)
            return False

    def remove(self, key: str) -> None:
        if self.folder is not None:
            shutil.rmtree(self._path(key), ignore_errors=True)


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _save_tensor(folder: Path, name: str, tensor: torch.Tensor) -> dict:
    data = tensor.detach().cpu().contiguous().reshape(-1)
    raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return {"file": name, "dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
            "sha256": hashlib.sha256(raw).hexdigest()}


def _load_tensor(folder: Path, entry: dict) -> torch.Tensor:
    raw = (folder / entry["file"]).read_bytes()
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise ValueError(f"{entry['file']} does not match its checksum")
    dtype = getattr(torch, entry["dtype"])
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {entry['dtype']}")
    shape = tuple(int(n) for n in entry["shape"])
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _warn(message: str) -> None:
    print(f"egg: warning: {message}", file=sys.stderr)
