"""The seventh red team's second pass (session 18), on the fixed sandbox, by a helper that had seen none of our
fixtures: 14 attempts (tests/fixtures/redteam8). No root, no shared uid, no user namespace, no file outside the
job; 5 got through and 3 in part, all on memory, disk or the machine's shared pools:
- 12: a reference that claims a 4 GiB output over a sparse file made the root parent allocate 4.5 GB: outputs
  beyond the job's memory limit, or beyond the reference's recorded sizes, are refused before any allocation;
- 05: links planted in a kept cache broke every later check of that candidate (`File exists`): a cache holding a
  link is discarded;
- 11: the host's pseudo-terminals exhausted from inside a job: the job's /dev/pts is an empty, read-only folder
  (tests/judge/test_isolation.py);
- 02: System V segments outside the memory count: bounded by the job's own IPC namespace (test_isolation.py);
- 13: a folder named .root deeper in a job folder on /dev/shm was skipped by the count (test_limits.py);
- left open, and not run here: 03 (socket and pipe buffers are kernel memory no count sees: it ran this machine
  out of memory; a per-job memory cgroup would hold it), 04 (disk filled through a kept cache, discarded only at
  the next job of that cache), 08 (the private /tmp and /dev/shm, 1 GB each, beside the memory limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

REDTEAM8 = ROOT / "tests" / "fixtures" / "redteam8"
CANDIDATE = ROOT / "examples" / "candidates" / "elementwise_triton.py"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user and the namespaces need root, as in CI and on the H200")


def test_every_attempt_of_the_second_pass_is_a_fixture_here():
    assert len(list(REDTEAM8.glob("*.py"))) == 15  # 14 attempts and one control (13b)


def check_peak(ref, cache, **env) -> tuple[dict, int]:
    """`egg check` in a process of its own: the verdict, and the most memory that process or any below it held (KB)."""
    code = ("import json, resource, subprocess, sys\n"
            "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)\n"
            "print(json.dumps({'out': done.stdout, 'peak_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
    argv = [sys.executable, "-m", "pipeline.cli", "check", str(CANDIDATE), "--ref", str(ref), "--device", "cpu", "--json"]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=330,
                          env={**os.environ, "EGG_CACHE": str(cache), **env})
    seen = json.loads(done.stdout)
    return json.loads(seen["out"]), seen["peak_kb"]


@needs_root
def test_a_claimed_output_no_job_could_hold_is_never_allocated_by_the_parent(tmp_path):
    result, peak_kb = check_peak(REDTEAM8 / "12_parent_output_inflate.py", tmp_path / "cache", EGG_JOB_MEMORY_GB="1")
    assert peak_kb < 2_500_000, (peak_kb, result["reason"])  # before: 4.5 GB in the parent for a 4 GiB claim
    assert result["status"] != "ok"


@needs_root
def test_links_planted_in_a_kept_cache_do_not_break_the_next_check(tmp_path):
    for _ in range(2):
        result, _ = check_peak(REDTEAM8 / "05_cache_symlink_plant.py", tmp_path / "cache")
        assert "File exists" not in result["reason"] and "sandbox failure" not in result["reason"], result["reason"]
    assert not (tmp_path / "ESCAPED_05").exists() and not os.path.exists("/tmp/redteam8/ESCAPED_05")
