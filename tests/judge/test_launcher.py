"""Every process that imports a problem or a candidate outside the judge's workers runs in the judge's sandbox:
the expert's capture of a pasted problem, the profiler's survey of a kernel. Each fixture's payload (module-level
code) tries to write outside its folder, list the home folder, read other processes' environments and start a
shell; with the sandbox none of it reaches anything, and the controls (isolation off) show the payloads work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.judge import launcher
from pipeline.profiler.survey import survey_candidate

from .conftest import FIXTURES, ROOT, TINY

PAYLOADS = FIXTURES / "payloads"
KEY = "sk-egg-payload-0123456789"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox (uid drop) needs root, as in CI and on the H200")


def aimed(name: str, outside: Path, folder: Path) -> Path:
    """A copy of a payload fixture aimed at `outside` (a folder the sandbox must not reach)."""
    text = (PAYLOADS / name).read_text().replace('os.environ.get("EGG_PAYLOAD_OUTSIDE", "/nonexistent")', repr(str(outside)))
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture
def outside(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


CAPTURE = """
import json, sys
from pipeline.expert import capture
source = open(sys.argv[1]).read()
capture.forget(source)
print(json.dumps(sorted({call.fn.rsplit(".", 1)[-1] for call in capture.capture(source).tape.calls})))
"""


def captured_ops(problem: Path, **env: str) -> set[str]:
    """The ops a capture recorded, run from a process started as a person starts egg: the key in its environment
    (where an unsandboxed payload reading /proc would find it)."""
    environment = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(ROOT), **env}
    run = subprocess.run([sys.executable, "-c", CAPTURE, str(problem)], env=environment, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return set(json.loads(run.stdout.strip().splitlines()[-1]))


@needs_root
def test_a_problem_with_a_payload_is_captured_in_the_sandbox(outside, tmp_path):
    ops = captured_ops(aimed("problem_with_payload.py", outside, tmp_path))
    assert "relu" in ops and "mul" not in ops, ops  # the payload saw no key
    assert list(outside.iterdir()) == []


@needs_root
def test_without_the_sandbox_the_same_payload_sees_the_key_and_writes_outside(outside, tmp_path):
    ops = captured_ops(aimed("problem_with_payload.py", outside, tmp_path), EGG_ISOLATION="off")
    assert "mul" in ops, ops
    assert (outside / "egg-payload-marker").exists()


@needs_root
def test_the_profilers_survey_runs_a_spawning_kernel_in_the_sandbox(outside, tmp_path):
    kernel = aimed("kernel_that_spawns.py", outside, tmp_path)
    survey = survey_candidate(kernel, TINY / "degenerate" / "2_ReLU.py")
    assert not survey.errors and survey.launches, survey.errors
    assert list(outside.iterdir()) == []


@needs_root
def test_without_the_sandbox_the_spawning_kernel_escapes(outside, tmp_path, monkeypatch):
    monkeypatch.setenv("EGG_ISOLATION", "off")
    kernel = aimed("kernel_that_spawns.py", outside, tmp_path)
    survey_candidate(kernel, TINY / "degenerate" / "2_ReLU.py")
    assert (outside / "egg-payload-spawned").exists()


def test_a_launched_process_that_fails_or_hangs_comes_back_as_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    failed = launcher.run("egg_no_such_module", [], workdir=tmp_path / "a", timeout_s=60)
    assert failed.error == "the process exited with 1" and "No module named egg_no_such_module" in failed.log_tail
    with pytest.raises(launcher.LaunchError, match="was used by a job before"):  # each launch a fresh folder
        launcher.run("egg_no_such_module", [], workdir=tmp_path / "a", timeout_s=60)
    (tmp_path / "b").mkdir()
    hung = launcher.run("http.server", ["--bind", "127.0.0.1", "0"], workdir=tmp_path / "b", timeout_s=2)
    assert hung.error == "timed out after 2 s"
