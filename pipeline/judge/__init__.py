"""The judge: sandboxed evaluation of candidates, correctness, timing and cheat detection.

`from pipeline.judge import evaluate, Judge` — loaded lazily, so the worker's imports stay small.
"""

from __future__ import annotations

__all__ = ["Judge", "evaluate"]


def __getattr__(name: str):
    if name in __all__:
        from pipeline.judge import judge

        return getattr(judge, name)
    raise AttributeError(name)
