"""The tuning engine: parameter spaces, search strategies, pruning on CPU, batched measurement, cache, rewrite.

`from pipeline.tuning import Space, PowerOfTwo, tune, ...` loads lazily: the measurement worker imports
`pipeline.tuning.worker` and must not pull in numpy-heavy strategies or pydantic.
"""

from __future__ import annotations

_EXPORTS = {
    "Config": "space", "Space": "space", "PowerOfTwo": "space", "IntRange": "space", "Choice": "space",
    "Constraint": "space", "SpaceError": "space", "launch_values": "space",
    "Budget": "strategy", "Effort": "strategy", "Strategy": "strategy", "make_strategy": "strategy", "STRATEGIES": "strategy",
    "Measurement": "measurement", "TuneStatus": "measurement", "Evaluator": "measurement",
    "LaunchRecipe": "recipe", "TensorSpec": "recipe",
    "BatchMeasurer": "measure", "MeasureSettings": "measure",
    "PrunedEvaluator": "prune", "Sm90Compiler": "prune", "BinaryFacts": "prune",
    "TuningCache": "cache", "CachedEvaluator": "cache",
    "bake_config": "rewrite", "RewriteError": "rewrite",
    "tune": "tune", "TuneRequest": "tune", "TuneResult": "tune", "Layers": "tune",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"pipeline.tuning.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
