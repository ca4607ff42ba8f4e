"""A SQLite cache of measurements, keyed by kernel source, shapes, environment and configuration.

The file is `${EGG_CACHE:-~/.cache/egg}/tuning.sqlite`. A measurement is only reused where everything that could
change it is the same: the kernel's source text (sha256), the launch's shape signature, the environment
fingerprint (GPU, driver stack, library versions) and the configuration's canonical key. Schema changes are a
list of migrations applied once each (PRAGMA user_version), so a later store can absorb this table.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.tuning.measurement import Evaluator, Measurement, TuneStatus
from pipeline.tuning.space import Config

MIGRATIONS = (
    """CREATE TABLE measurements (
        kernel_sha256 TEXT NOT NULL,
        shapes TEXT NOT NULL,
        environment TEXT NOT NULL,
        config_key TEXT NOT NULL,
        status TEXT NOT NULL,
        time_ms REAL,
        detail TEXT NOT NULL,
        trials INTEGER NOT NULL,
        twin TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (kernel_sha256, shapes, environment, config_key)
    )""",
)
# Outcomes that say something lasting about a configuration. Timeouts and crashes may be the machine's fault;
# an "ok" without a time (timing skipped on a CPU) says nothing about speed.
CACHEABLE = frozenset({TuneStatus.OK, TuneStatus.MISMATCH, TuneStatus.COMPILE_ERROR, TuneStatus.TOO_SLOW,
                       TuneStatus.SPILLS, TuneStatus.SHARED_OVERFLOW, TuneStatus.DUPLICATE_BINARY})


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("EGG_CACHE") or "~/.cache/egg").expanduser() / "tuning.sqlite"


def fingerprint(environment: Mapping[str, str]) -> str:
    """A short, stable digest of an environment description (GPU, versions)."""
    return hashlib.sha256(json.dumps(dict(environment), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CacheScope:
    """Everything besides the configuration that a measurement depends on."""

    kernel_sha256: str
    shapes: str
    environment: str

    @classmethod
    def of(cls, source: str, shapes: str, environment: Mapping[str, str]) -> CacheScope:
        return cls(hashlib.sha256(source.encode()).hexdigest(), shapes, fingerprint(environment))


class TuningCache:
    """The measurement cache in one SQLite file (safe to share between processes)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._migrate()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        for number, statement in enumerate(MIGRATIONS[version:], start=version + 1):
            with self._db:
                self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")

    def get(self, scope: CacheScope, configs: Sequence[Config]) -> dict[str, Measurement]:
        """Cached outcomes of `configs` in `scope`, by config key (marked not measured: no device time now)."""
        found: dict[str, Measurement] = {}
        wanted = {c.key: c for c in configs}
        keys = list(wanted)
        for start in range(0, len(keys), 500):  # SQLite limits bound parameters per statement
            chunk = keys[start:start + 500]
            rows = self._db.execute(
                f"SELECT config_key, status, time_ms, detail, trials, twin FROM measurements WHERE kernel_sha256 = ? "
                f"AND shapes = ? AND environment = ? AND config_key IN ({','.join('?' * len(chunk))})",
                (scope.kernel_sha256, scope.shapes, scope.environment, *chunk),
            )
            for key, status, time_ms, detail, trials, twin in rows:
                found[key] = Measurement(wanted[key], TuneStatus(status), time_ms, detail, trials, measured=False, twin=twin)
        return found

    def put(self, scope: CacheScope, measurements: Sequence[Measurement]) -> int:
        """Store the lasting outcomes among `measurements`; returns how many were stored."""
        rows = [
            (scope.kernel_sha256, scope.shapes, scope.environment, m.config.key, m.status.value, m.time_ms, m.detail, m.trials, m.twin, time.time())
            for m in measurements
            if m.status in CACHEABLE and (m.status is not TuneStatus.OK or m.time_ms is not None)
        ]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return len(rows)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TuningCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CachedEvaluator:
    """An evaluator that answers from the cache where it can and measures only the rest (then stores them)."""

    def __init__(self, inner: Evaluator, cache: TuningCache, scope: CacheScope) -> None:
        self.inner, self.cache, self.scope = inner, cache, scope
        self.hits = 0

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        cached = self.cache.get(self.scope, configs)
        missing = [c for c in configs if c.key not in cached]
        fresh = {m.config.key: m for m in (self.inner.evaluate(missing) if missing else [])}
        self.cache.put(self.scope, list(fresh.values()))
        self.hits += len(cached)
        return [cached.get(c.key) or fresh[c.key] for c in configs]

