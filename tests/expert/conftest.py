"""The expert tests share one capture cache (a temporary $EGG_CACHE, for this package only: other tests find their
caches where they expect them), so each problem is recorded once per run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package", autouse=True)
def expert_cache(tmp_path_factory):
    import os

    from pipeline.expert.lowering import prime
    from tests.expert.problems import DEGENERATE, TINY, ZOO

    folder = tmp_path_factory.mktemp("egg-cache")
    previous = os.environ.get("EGG_CACHE")
    os.environ["EGG_CACHE"] = str(folder)
    prime([p.read_text() for p in (*TINY, *DEGENERATE, *ZOO)])  # one child records them all
    yield folder
    if previous is None:
        os.environ.pop("EGG_CACHE", None)
    else:
        os.environ["EGG_CACHE"] = previous
