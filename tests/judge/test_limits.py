"""Limits on every job: printed output capped with its tail kept, memory held to a limit with a clear verdict,
processes that outlive a call caught, and the parent's own watch on a job's memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pipeline.judge import limits
from pipeline.judge.judge import Judge
from pipeline.problems.loader import load_candidate
from pipeline.types import EvalOptions, Status

from .conftest import ROOT, problem

LIMITS = ROOT / "tests" / "fixtures" / "limits"
SOFTMAX = "level1/23_Softmax.py"
OPTIONS = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1, compile_timeout_s=60, run_timeout_s=60)


def no_static_findings(source, reference_dtypes=frozenset()):
    return ()


def test_a_gigabyte_of_output_keeps_its_tail_and_says_what_was_dropped():
    with Judge(OPTIONS) as judge:
        result = judge.evaluate(problem(SOFTMAX), load_candidate(LIMITS / "prints_a_gigabyte.py"))
    assert result.status is Status.OK, result.reason
    dropped = next(f for f in result.flags if f.name == "output_dropped")
    assert "MB more than its log keeps" in dropped.message and float(dropped.message.split()[3]) > 1000


def test_a_memory_hog_gets_a_verdict_that_names_the_limit(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "2")
    with Judge(OPTIONS) as judge:
        result = judge.evaluate(problem(SOFTMAX), load_candidate(LIMITS / "memory_hog.py"))
    assert result.status is Status.RUNTIME_ERROR
    assert result.reason.startswith("call trial_1 went over the memory limit of 2 GB"), result.reason


def test_memory_held_in_an_unmapped_memory_file_counts_against_the_limit(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "2")
    with Judge(OPTIONS, auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), load_candidate(LIMITS / "memfd_hog.py"))
    assert result.status is Status.RUNTIME_ERROR, result.reason
    assert "over the memory limit of 2 GB" in result.reason, result.reason


@pytest.mark.skipif(os.geteuid() != 0, reason="the PID namespace (and the sandbox user) need root, as in CI and on the H200")
def test_processes_left_running_after_a_call_are_caught():
    with Judge(OPTIONS, auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), load_candidate(LIMITS / "fork_storm.py"))
    assert result.status is Status.BANNED, result.reason
    assert result.reason.startswith("background_threads: processes still running after call(s) trial_1"), result.reason


def test_the_parent_sums_the_memory_of_a_job_and_its_children_counting_shared_pages_once(tmp_path):
    ready = tmp_path / "forked"
    code = ("import os, sys, time\nblock = bytearray(300 << 20)\nfor i in range(0, len(block), 4096): block[i] = 1\n"
            f"if os.fork() == 0:\n    open({str(ready)!r}, 'w').close()\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not ready.exists():
            time.sleep(0.1)
        time.sleep(0.3)
        seen = limits.tree_rss_bytes(child.pid)
    finally:
        os.killpg(child.pid, 9)
        child.wait()
    assert ready.exists()
    assert 290 << 20 <= seen < 500 << 20, seen  # both hold the 300 MB block, shared: counted once, not twice


def test_default_limits_come_from_the_machine_or_the_environment(monkeypatch):
    monkeypatch.delenv(limits.MEMORY_VARIABLE, raising=False)
    assert limits.default_limits().memory_bytes == limits.machine_memory_bytes() // 2
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "3.5")
    assert limits.default_limits().memory_bytes == int(3.5 * 2**30)
    assert limits.default_limits(1.0).memory_bytes == 2**30


def test_job_folders_of_a_killed_process_are_removed_at_the_next_start(tmp_path):
    """A pool's process killed with SIGKILL leaves its job folders; the next pool made there removes them (and
    leaves a live process's alone)."""
    code = "import sys, time\nfrom pipeline.judge.sandbox import WorkerPool\nWorkerPool('cpu', root=sys.argv[1])\nprint('made', flush=True)\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout.readline().strip() == "made"
    left = list(tmp_path.glob("egg-jobs-*"))
    child.kill()
    child.wait()
    from pipeline.judge.sandbox import WorkerPool

    with WorkerPool("cpu", root=tmp_path):
        assert [p for p in left if p.exists()] == []
        assert len(list(tmp_path.glob("egg-jobs-*"))) == 1  # this pool's own


@pytest.mark.parametrize("name, status", [("softmax_ok.py", Status.OK), ("segfault.py", Status.RUNTIME_ERROR), ("hang_first_call.py", Status.TIMEOUT)])
def test_the_reference_keeps_at_most_two_sets_ahead_of_the_candidate_and_never_deadlocks(monkeypatch, name, status):
    """With room for no reference output at all in the judge, its worker runs two checked sets ahead and then
    waits for the judge to let one go; a candidate that crashes or hangs still ends its check at once."""
    from pipeline.judge import judge as judge_module

    from .conftest import candidate

    monkeypatch.setitem(judge_module.REFERENCE_AHEAD_BYTES, "cpu", 1)
    with Judge(EvalOptions(device="cpu", compile_timeout_s=8, run_timeout_s=8)) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate(name))
    assert result.status is status, result.reason
    assert result.duration_s < 25


def test_a_folder_named_like_the_jobs_root_deeper_down_still_counts(tmp_path):
    """The seventh red team's second pass hid 3 GiB under a/.root in a job folder on /dev/shm: only the job's own
    new root (the .root directly in its folder) is skipped."""
    (tmp_path / ".root").mkdir()
    (tmp_path / ".root" / "system").write_bytes(b"\0" * 1000)
    (tmp_path / "a" / ".root").mkdir(parents=True)
    (tmp_path / "a" / ".root" / "hidden").write_bytes(b"\0" * 5000)
    (tmp_path / "plain").write_bytes(b"\0" * 300)
    assert limits.folder_bytes(str(tmp_path)) == 5300
