"""The reference cache: a later check of any candidate on a problem, in a new process, skips the full reference run
(its facts are on disk; its outputs are computed afresh for the check's own inputs); a changed problem, option,
environment or judge misses; a corrupt entry is recomputed; no candidate can reach it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline
from pipeline.judge import isolation
from pipeline.judge.judge import Judge
from pipeline.judge.refcache import ReferenceCache, cache_key, environment_fingerprint
from pipeline.judge.sandbox import WorkerPool
from pipeline.types import EvalOptions, Status

from .conftest import TINY, candidate, problem

SOFTMAX = "level1/23_Softmax.py"
OPTIONS = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1, compile_timeout_s=60, run_timeout_s=60,
                      other_shapes=False)  # one problem, one cache entry: the derived problems' entries are not what these tests count


def judged(cache, name="softmax_ok.py", prob=SOFTMAX, options=OPTIONS):
    with Judge(options, cache_dir=cache) as judge:
        return judge.evaluate(problem(prob) if isinstance(prob, str) else prob, candidate(name))


def test_a_second_judge_takes_the_facts_from_disk_and_a_second_candidate_from_memory(tmp_path):
    first = judged(tmp_path)
    assert (first.status, first.reference_source) == (Status.OK, "computed")
    with Judge(OPTIONS, cache_dir=tmp_path) as judge:
        again = judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
        other = judge.evaluate(problem(SOFTMAX), candidate("softmax_optional_import.py"))
    assert (again.status, again.reference_source) == (Status.OK, "disk")
    assert (other.status, other.reference_source) == (Status.OK, "memory")
    assert again.environment["torch"] == first.environment["torch"]


def test_every_check_draws_fresh_inputs_however_the_facts_were_found(tmp_path):
    """The facts are cached, the inputs never are: no two checks share a seed, so no candidate can know one."""
    seeds = [judged(tmp_path).input_seeds for _ in range(3)]
    names = {"trial_1", "trial_2", "signed", "scaled", "outliers", "audit"}
    assert all(set(s) == names for s in seeds), seeds
    # the outliers trial is the first trial's draws with 1% of the values changed (session 28): its seed is that trial's
    assert all(s["outliers"] == s["trial_1"] for s in seeds)
    drawn = [v for s in seeds for k, v in s.items() if k != "outliers"]
    assert len(set(drawn)) == len(drawn)


def test_a_repeat_egg_check_in_a_new_process_skips_the_reference_run(tmp_path):
    env = dict(os.environ, EGG_CACHE=str(tmp_path))
    command = [sys.executable, "-m", "pipeline.cli", "check", str(pipeline.ROOT / "examples" / "candidates" / "softmax_triton.py"),
               "--ref", str(TINY / SOFTMAX), "--device", "cpu", "--json", "--trials", "2"]
    sources = []
    for _ in range(2):
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        result = json.loads(run.stdout)
        assert result["status"] == "ok", result["reason"]
        sources.append(result["reference_source"])
        assert {"reference_lookup", "audit", "reference", "candidate", "checks", "worker_calls", "total"} <= set(result["judge_phase_s"])
        marks = result["cli_s"]  # the worker server was started before the CLI's own imports
        assert marks["server_launched"] < marks["cli_imported"] <= marks["verdict_started"], marks
        assert result["judge_phase_s"]["worker_isolation"] > 0
    assert sources == ["computed", "disk"]
    assert list((tmp_path / "references").glob("*/*.json"))


def test_a_changed_problem_or_option_misses(tmp_path):
    judged(tmp_path)
    changed = tmp_path / "level1" / "23_Softmax.py"
    changed.parent.mkdir(parents=True)
    changed.write_text((TINY / SOFTMAX).read_text().replace("dim = 64", "dim = 32"))
    from pipeline.problems.loader import load_problem

    assert judged(tmp_path, prob=load_problem(changed)).reference_source == "computed"
    assert judged(tmp_path, options=dataclasses.replace(OPTIONS, seed=7)).reference_source == "computed"
    assert judged(tmp_path, options=dataclasses.replace(OPTIONS, signed_trial=False)).reference_source == "computed"
    # what only shapes the candidate's run (timeouts, repeats, the subsample) shares the entry
    assert judged(tmp_path, options=dataclasses.replace(OPTIONS, run_timeout_s=30, repeat_calls=2)).reference_source == "disk"


def test_the_key_covers_the_environment_and_the_judges_own_code():
    env = environment_fingerprint("cpu")
    base = cache_key("f" * 64, OPTIONS, env)
    for field, value in (("torch", "9.9"), ("triton", "0.1"), ("device", "cuda")):
        assert cache_key("f" * 64, OPTIONS, dict(env, **{field: value})) != base
    gpu = dict(env, device="cuda", gpu="NVIDIA H200", driver="580.159.04")
    assert cache_key("f" * 64, OPTIONS, dict(gpu, driver="580.159.05")) != cache_key("f" * 64, OPTIONS, gpu)
    assert cache_key("f" * 64, OPTIONS, dict(gpu, gpu="NVIDIA H100")) != cache_key("f" * 64, OPTIONS, gpu)
    assert cache_key("e" * 64, OPTIONS, env) != base


def test_the_judges_code_fingerprint_covers_every_judge_module(tmp_path, monkeypatch):
    """A change to any file of pipeline/judge (the verdict's checks, not only the worker) is a new fingerprint."""
    from pipeline.judge import refcache

    folder = tmp_path / "judge"
    shutil.copytree(Path(refcache.__file__).parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(refcache, "__file__", str(folder / "refcache.py"))
    refcache.judge_code_fingerprint.cache_clear()
    try:
        before = refcache.judge_code_fingerprint()
        (folder / "verdict.py").write_text((folder / "verdict.py").read_text() + "\n# changed\n")
        refcache.judge_code_fingerprint.cache_clear()
        assert refcache.judge_code_fingerprint() != before
    finally:
        monkeypatch.undo()
        refcache.judge_code_fingerprint.cache_clear()


def entry_files(cache: Path) -> list[Path]:
    root = cache / "references" if (cache / "references").exists() else cache
    return sorted(root.glob("*/*.json"))


@pytest.mark.parametrize("damage", ["truncate", "edit_facts", "garbage"])
def test_a_corrupt_entry_is_dropped_and_recomputed(tmp_path, damage, capfd):
    judged(tmp_path)
    (entry,) = entry_files(tmp_path)
    if damage == "truncate":
        entry.write_bytes(entry.read_bytes()[:-40])
    elif damage == "edit_facts":
        record = json.loads(entry.read_text())
        record["body"]["facts"]["result"]["baselines"] = {"eager": {"median_ms": 0.001}}
        entry.write_text(json.dumps(record))
    else:
        entry.write_text("{not json")
    result = judged(tmp_path)
    assert (result.status, result.reference_source) == (Status.OK, "computed")
    assert "dropping a corrupt reference cache entry" in capfd.readouterr().err
    assert judged(tmp_path).reference_source == "disk"  # written again, whole


def test_fresh_reference_outputs_still_catch_a_wrong_candidate(tmp_path):
    judged(tmp_path)
    bad = judged(tmp_path, name="cheat_stale_memory.py")
    assert (bad.status, bad.reference_source) == (Status.MISMATCH, "disk")


def test_waiting_for_the_reference_does_not_count_against_the_candidates_timeouts(tmp_path):
    """A candidate that waits for its start while a slow reference runs is not timed out for it: the wait is
    measured on the judge's clock, from the worker's report that it waits to the judge's message."""
    slow = tmp_path / "level1" / "23_Softmax.py"
    slow.parent.mkdir()
    slow.write_text((TINY / SOFTMAX).read_text().replace("import torch\n", "import time\n\nimport torch\n", 1)
                    .replace("    def __init__(self", "    def __init__(self", 1)
                    .replace("        return torch.softmax", "        time.sleep(0.4)\n        return torch.softmax"))
    from pipeline.problems.loader import load_problem

    options = dataclasses.replace(OPTIONS, compile_timeout_s=2.0, run_timeout_s=2.0)
    result = judged(tmp_path / "cache", prob=load_problem(slow), options=options)  # the reference takes about 4 s
    assert (result.status, result.reference_source) == (Status.OK, "computed"), result.reason
    assert result.phase_s["wait_start"] > 2.0


def test_no_disk_cache_when_asked(tmp_path):
    assert judged(None).reference_source == "computed"
    assert judged(None).reference_source == "computed"


@pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root, as in CI and on the H200")
def test_a_job_sees_neither_the_reference_cache_nor_another_candidates_compile_cache(tmp_path):
    from .test_isolation import run_in_child

    cache_root = tmp_path / "egg-cache"
    pool = WorkerPool("cpu", root=tmp_path, cache_root=cache_root)
    try:
        ReferenceCache(cache_root / "references").store("k" * 64, {"secret": "reference facts"})
        pool._sandbox_cache("candidate-other")
        pool.python_paths = isolation.python_paths(exclude=(str(pipeline.ROOT),))
        work = pool.new_workdir("candidate")
        plan = pool.plan(work, (), "candidate-mine")

        def look() -> dict:
            isolation.enter(plan)
            mine = cache_root / "sandbox" / "candidate-mine" / "triton"
            (mine / "kernel.cubin").write_text("compiled")
            return {"references": (cache_root / "references").exists(), "other": (cache_root / "sandbox" / "candidate-other").exists(),
                    "mine_writable": (mine / "kernel.cubin").exists(), "uid": isolation.is_sandbox_uid(os.getuid())}

        seen = run_in_child(look)
    finally:
        pool.close()
    assert seen == {"references": False, "other": False, "mine_writable": True, "uid": True}
    assert oct(os.stat(cache_root / "references").st_mode & 0o777) == "0o700"


def test_an_early_worker_server_is_handed_over_once_and_only_for_its_device():
    from pipeline.judge import sandbox

    sandbox.start_early_pool("cpu")
    pool = sandbox.take_early_pool("cpu")
    try:
        assert pool is not None and pool.device == "cpu"
        pool.wait_ready()  # a real server, serving
        assert sandbox.take_early_pool("cpu") is None  # handed over once
    finally:
        pool.close()
    sandbox.start_early_pool("cpu")
    assert sandbox.take_early_pool("cuda") is None  # a guess for the wrong device is closed, not used
    assert sandbox.take_early_pool("cpu") is None
