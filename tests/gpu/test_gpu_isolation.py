"""Isolation on the GPU machine: the escape fixtures through a CUDA judge. Run there: pytest -m gpu tests/gpu.

The same fixtures and the same person's machine (an API key in egg's environment, egg's config and ~/.netrc in
home, a .env where they work) as tests/judge/test_isolation.py, on the full-size softmax: banned by the static
audit; with the audit off, `ok` because the sandbox holds, with the GPU's device files still usable and the outputs
handed to the judge in device memory; mismatch only with isolation off.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.judge import isolation

from ..judge.test_isolation import KEY, LEAKS, _marker_places, _remove_markers, judge_in_a_process, person  # noqa: F401

pytestmark = pytest.mark.gpu
SUITE_SOFTMAX = Path(__file__).resolve().parents[2] / "data" / "problems" / "suite" / "level1" / "23_Softmax.py"


@pytest.fixture(autouse=True)
def needs_gpu():
    if not torch.cuda.is_available():
        pytest.fail("tests marked gpu need a CUDA GPU")


def test_escape_fixtures_are_banned_on_the_gpu(person):  # noqa: F811
    results = judge_in_a_process(*person, audit=True, isolate=True, device="cuda", problem=SUITE_SOFTMAX)
    assert {name: r["status"] for name, r in results.items()} == {name: "banned" for name in LEAKS}


def test_isolation_alone_holds_on_the_gpu(person):  # noqa: F811
    env, work, cands = person
    _remove_markers(cands)
    results = judge_in_a_process(env, work, cands, audit=False, isolate=True, device="cuda", problem=SUITE_SOFTMAX)
    for name, result in results.items():
        assert result["status"] == "ok", (name, result["reason"], result["log_tail"][-2000:])
        record = result["environment"]["isolation"]
        assert "pid_namespace=yes" in record and "filesystem=own_root" in record and "seccomp=yes" in record, record
        assert isolation.is_sandbox_uid(int(re.search(r"\buid=(\d+)", record).group(1))), record
        assert result["environment"]["output_transport"] == "device", result["environment"]
        assert result["timing"] is not None
    assert [p for p in _marker_places(cands) if p.exists() or Path(str(p) + "-pathlib").exists()] == []


def test_without_isolation_the_fixtures_see_the_secrets_on_the_gpu(person):  # noqa: F811
    env, work, cands = person
    try:
        results = judge_in_a_process(env, work, cands, audit=False, isolate=False, device="cuda", problem=SUITE_SOFTMAX)
        assert {name: r["status"] for name, r in results.items()} == {name: "mismatch" for name in LEAKS}
    finally:
        _remove_markers(cands)


def test_egg_check_with_a_key_set_on_the_gpu(person):  # noqa: F811
    """The issue's measurement: `egg check` of the ancestor walker with OPENAI_API_KEY set (through the CLI when
    typer and rich are installed here)."""
    env, work, cands = person
    if subprocess.run([sys.executable, "-c", "import typer, rich"], capture_output=True).returncode != 0:
        pytest.skip("the CLI needs typer and rich (carry them as wheels); the other tests cover the judge itself")
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "check", str(cands / "leak_ancestor_environ.py"), "--ref", str(SUITE_SOFTMAX),
                          "--device", "cuda", "--json"], env=env, cwd=work, capture_output=True, text=True, timeout=600)
    result = json.loads(run.stdout)
    assert result["status"] == "banned" and result["reason"].startswith(("dynamic_code", "banned_import")), result["reason"]
    assert KEY not in run.stdout and KEY not in run.stderr
