"""The seventh red team (session 18), a helper that had seen none of our fixtures, attacking the sandbox with problem
files (whose module code is not audited) through `egg check`, `egg optimize` and `egg profile`. Of its 11 attempts
(tests/fixtures/redteam7) 3 got through and 4 in part on the code it attacked; each is held here:
- 02, 09: a tree longer than PATH_MAX left in a kept compile cache (a problem's, or through `get_inputs` in the
  candidate's worker, a candidate's) made root's hand-over of that cache fail, and the next job ran as root: it
  mounted the host's disk and wrote on it. A job that cannot leave root is no longer run, the hand-over walks by
  descriptors, and a cache deeper, larger or fuller than compile caches are is discarded before it is handed on;
- 05: 4 GiB held in an unmapped memfd under a 1 GiB limit: memory files a job holds open now count;
- 03, 04: a result.json nested 200,000 deep or of 10.9 million values parsed by plain json.loads: it is read as
  every other job file is (strict, bounded);
- 06: gigabytes written into a kept cache outlived the run: the cache is discarded before the next job gets it
  (during the run itself the disk is not watched: the job-folder size limit is per file);
- 10: a problem that does not run ended `egg optimize` with a traceback: one line, exit 2.
Held on the first try, kept as fixtures: 01 (recon), 07 (seccomp and network), 08 (host /dev, /proc, /sys), 11
(the profiler's survey).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.judge import isolation, sandbox

from .conftest import ROOT, TINY

REDTEAM7 = ROOT / "tests" / "fixtures" / "redteam7"
CANDIDATE = ROOT / "examples" / "candidates" / "elementwise_triton.py"
GELU = TINY / "level1" / "16_GELU_Scale_Bias.py"
ATTEMPTS = ("01_recon.py", "02_chown_nametoolong_root.py", "03_result_json_nesting.py", "04_result_json_values.py",
            "05_memfd_memory.py", "06_disk_persist.py", "07_syscalls_network.py", "08_dev_proc_sys.py",
            "09_poison_candidate_cache.py", "10_optimize_capture.py", "11_profile_survey.py")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user and the namespaces need root, as in CI and on the H200")


def test_every_attempt_of_the_seventh_red_team_is_a_fixture_here():
    assert sorted(p.name for p in REDTEAM7.glob("*.py")) == sorted(ATTEMPTS)


def check(ref: Path, cache: Path, candidate: Path = CANDIDATE, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "check", str(candidate), "--ref", str(ref), "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "EGG_CACHE": str(cache), **env})
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout)


def job_uid(result: dict) -> int:
    return int(re.search(r"\buid=(\d+)", result["environment"]["isolation"]).group(1))


@needs_root
def test_a_poisoned_problem_cache_never_gives_a_later_job_root(tmp_path):
    for _ in range(2):  # the first check plants the tree; every later job gets a fresh cache and its own uid
        result = check(REDTEAM7 / "02_chown_nametoolong_root.py", tmp_path / "cache")
        assert "ESCAPE" not in result["reason"] and not result["environment"].get("isolation_missing"), result["reason"]
        assert isolation.is_sandbox_uid(job_uid(result)), result["environment"]
    assert not Path("/tmp/redteam7/ESCAPED_02").exists()


@needs_root
def test_a_problem_that_poisons_a_candidates_cache_leaves_its_next_honest_check_unharmed(tmp_path):
    check(REDTEAM7 / "09_poison_candidate_cache.py", tmp_path / "cache")
    honest = check(GELU, tmp_path / "cache")
    assert honest["status"] == "ok", honest["reason"]
    assert isolation.is_sandbox_uid(job_uid(honest)) and not honest["environment"].get("isolation_missing"), honest["environment"]


@pytest.mark.parametrize("name", ["03_result_json_nesting.py", "04_result_json_values.py"])
def test_a_result_file_no_parser_should_take_is_the_problems_failure_not_the_judges(tmp_path, name):
    result = check(REDTEAM7 / name, tmp_path / "cache")
    assert "RecursionError" not in result["reason"] and "the judge failed" not in result["reason"], result["reason"]
    assert result["reason"].startswith("the reference problem failed to run: result.json is not JSON"), result["reason"]


@needs_root
def test_memory_held_in_a_memfd_by_a_problem_ends_its_job_at_the_limit(tmp_path):
    result = check(REDTEAM7 / "05_memfd_memory.py", tmp_path / "cache", EGG_JOB_MEMORY_GB="1")
    assert "MEMFD held" not in result["reason"], result["reason"]
    assert result["reason"].startswith("the reference problem failed to run: over the memory limit of 1 GB"), result["reason"]


def test_a_kept_cache_larger_deeper_or_fuller_than_compile_caches_is_discarded_before_the_next_job(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "CACHE_LIMIT_BYTES", 1 << 20)
    pool = sandbox.WorkerPool("cpu", cache_root=tmp_path)
    try:
        cache = pool._sandbox_cache("candidate-x")
        (cache / "triton" / "kernel.cubin").write_bytes(b"\0" * 4096)
        assert pool._sandbox_cache("candidate-x") == cache and (cache / "triton" / "kernel.cubin").exists()  # a real cache stays
        (cache / "xdg" / "filler").write_bytes(b"\1" * (2 << 20))  # over the (lowered) limit: gone, a fresh cache instead
        assert pool._sandbox_cache("candidate-x") == cache and not (cache / "xdg" / "filler").exists() and (cache / "triton").is_dir()
        deep = cache / "inductor"
        for _ in range(sandbox.CACHE_LIMIT_DEPTH + 1):
            deep = deep / "d"
        deep.mkdir(parents=True)
        pool._sandbox_cache("candidate-x")
        assert not (cache / "inductor" / "d").exists()
    finally:
        pool.close()


def test_a_problem_that_does_not_run_ends_egg_optimize_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "optimize", str(REDTEAM7 / "10_optimize_capture.py"), "--device", "cpu",
                           "--seeds", "1", "--rounds", "0", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EGG_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "error: the reference problem failed to run" in done.stderr, done.stderr[-2000:]


HELD = {  # what each reports in the reference's error: refused, read-only, unreachable
    "01_recon.py": ("CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "pids=1,2", "/sys/fs/cgroup:ro"),
    "07_syscalls_network.py": ("Connection refused", "ifaces=lo |", "AF_VSOCK: Operation not permitted",
                               "unshare(NEWUSER): ret=-1 errno=Operation not permitted", "clone3: ret=-1 errno=Function not implemented",
                               "io_uring_setup: ret=-1 errno=Operation not permitted"),
    "08_dev_proc_sys.py": ("create /dev/egg_x: Permission denied", "open /dev/vda: Permission denied", "write core_pattern: Permission denied",
                           "Read-only file system"),
}


@needs_root
@pytest.mark.parametrize("name", sorted(HELD))
def test_what_held_from_inside_still_holds(tmp_path, name):
    """Each reports what it reached in the reference's error: no root, no host, no other job, no kernel surface."""
    reason = check(REDTEAM7 / name, tmp_path / "cache")["reason"]
    for seen in HELD[name]:
        assert seen in reason, (seen, reason)
    uid = re.search(r"\buid=(\d+)", reason)
    assert uid is None or isolation.is_sandbox_uid(int(uid.group(1))), reason
