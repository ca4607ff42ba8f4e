"""The reference cache: what a problem's reference run gave, kept on disk so no later check runs it again.

An entry holds the reference's facts: output structure, compute ops and the work they do, FLOPs and bytes, the
eager and torch.compile baselines with the calibration of the judge's clocks they gave, the copy bandwidth the
physical floor uses, the degeneracy verdict, and which hidden trials (signed, scaled inputs) the problem can
take. Outputs are never cached: every check draws fresh inputs from the operating system's randomness, and a
fresh reference worker computes their outputs while the candidate's worker starts.

The key is everything the reference depends on: the problem's content fingerprint, every option that shapes the
reference run, the environment (Python, torch, triton, numpy, and on a GPU its name, memory, CUDA and driver
versions) and the source of the judge's own code. A change to any of them is a miss. Entries are written to a
temporary file and renamed into place, so a reader sees a whole entry or none; each carries a checksum, so a
corrupt or truncated one is dropped and recomputed. The cache folder is egg's (mode 0700) and lies outside every
job's view (pipeline.judge.isolation), so no candidate can read or write it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

SCHEMA = 2
# Options that never change what the reference computes (the candidate's timeouts, how its outputs are subsampled).
_CANDIDATE_ONLY_OPTIONS = frozenset({"compile_timeout_s", "run_timeout_s", "repeat_calls", "subsample_above"})


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
    """The judge's code as it is now (every module of pipeline/judge): a change to how candidates or references
    are run or judged invalidates every cached reference and every stored verdict."""
    folder = Path(__file__).parent
    digest = hashlib.sha256(str(SCHEMA).encode())
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(problem_fingerprint: str, options: Any, environment: dict[str, str]) -> str:
    """The entry's name: a hash of everything the reference run depends on."""
    shaping = {k: v for k, v in sorted(dataclasses.asdict(options).items()) if k not in _CANDIDATE_ONLY_OPTIONS}
    material = {"schema": SCHEMA, "problem": problem_fingerprint, "options": shaping, "environment": environment,
                "judge": judge_code_fingerprint()}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class ReferenceCache:
    """Entries under `folder` (created 0700); `folder=None` keeps nothing."""

    def __init__(self, folder: str | os.PathLike | None) -> None:
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.folder, 0o700)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The entry's facts, or None (missing, or corrupt: then it is removed and will be recomputed)."""
        if self.folder is None:
            return None
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
            body = record["body"]
            if record["digest"] != _digest(body) or body["key"] != key or body["schema"] != SCHEMA:
                raise ValueError("checksum or key mismatch")
            return body["facts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _warn(f"dropping a corrupt reference cache entry {key[:12]} ({exc})")
            path.unlink(missing_ok=True)
            return None

    def store(self, key: str, facts: dict[str, Any]) -> bool:
        """Write an entry. False if nothing was written."""
        if self.folder is None:
            return False
        final = self._path(key)
        body = {"schema": SCHEMA, "key": key, "facts": facts}
        try:
            final.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.folder)
            with os.fdopen(fd, "w") as f:
                json.dump({"digest": _digest(body), "body": body}, f)
            os.replace(tmp, final)
            return True
        except OSError as exc:
            _warn(f"could not write the reference cache entry ({exc}); the next check runs the reference again")
            return False

    def remove(self, key: str) -> None:
        if self.folder is not None:
            self._path(key).unlink(missing_ok=True)


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _warn(message: str) -> None:
    print(f"egg: warning: {message}", file=sys.stderr)
