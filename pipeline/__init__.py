"""egg's engine: turns PyTorch programs into faster, verified Triton kernels.

`pipeline` is a common top-level name (django-pipeline installs one). egg's child processes are started with this
repository first on their path and `EGG_PIPELINE_ROOT` naming it; a copy of egg's engine found anywhere else
refuses to load there, so a stale or foreign install can never judge a candidate quietly.
"""

import os as _os
from pathlib import Path as _Path

__version__ = "0.1.0"

ROOT = _Path(__file__).resolve().parent.parent  # the folder holding this `pipeline` package
_expected = _os.environ.get("EGG_PIPELINE_ROOT")
if _expected and _Path(_expected).resolve() != ROOT:
    raise ImportError(f"this process was started for egg's engine in {_expected}, but imported another `pipeline` from {ROOT}")
