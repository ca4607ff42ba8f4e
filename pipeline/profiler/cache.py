"""Profiles kept on disk, so that no candidate is profiled twice in the same environment.

Key: sha256 of the candidate's source, the problem's fingerprint, the environment's fingerprint and how it was
profiled (the source asked for, the metric set). Values: ProfileReport JSON files under `<cache>/profiles/`.
The cache folder is `$EGG_CACHE` (default `~/.cache/egg`); the run store (SQLite) comes with a later issue.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from pipeline.profiler.report import ProfileReport
from pipeline.types import from_jsonable, to_jsonable

CACHE_VARIABLE = "EGG_CACHE"
SCHEMA = 2  # bump when ProfileReport or the classification rules change: old entries are then never read


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$EGG_CACHE`, else `~/.cache/egg`."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "egg")


def profile_key(candidate_sha256: str, problem_fingerprint: str, environment: str, mode: str) -> str:
    """The cache key of one profile (hex sha256)."""
    text = "\n".join((f"schema {SCHEMA}", candidate_sha256, problem_fingerprint, environment, mode))
    return hashlib.sha256(text.encode()).hexdigest()


class ProfileCache:
    """ProfileReports by key, one JSON file each; a damaged file is a miss, never an error."""

    def __init__(self, root: Path | None = None) -> None:
        self.folder = (root or cache_root()) / "profiles"

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> ProfileReport | None:
        try:
            return from_jsonable(ProfileReport, json.loads(self.path(key).read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def put(self, key: str, report: ProfileReport) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path(key).with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(to_jsonable(report), indent=1))
        tmp.replace(self.path(key))
