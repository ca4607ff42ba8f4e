"""The reference cache: a later check of any candidate on a problem, in a new process, skips the reference run;
a changed problem, option or environment misses; a corrupt entry is recomputed; no candidate can reach it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pipeline
from pipeline.judge import isolation
from pipeline.judge.judge import Judge
from pipeline.judge.refcache import ReferenceCache, cache_key, environment_fingerprint
from pipeline.judge.sandbox import WorkerPool
from pipeline.types import EvalOptions, Status

from .conftest import TINY, candidate, problem

SOFTMAX = "level1/23_Softmax.py"
OPTIONS = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1, compile_timeout_s=60, run_timeout_s=60)


def judged(cache, name="softmax_ok.py", prob=SOFTMAX, options=OPTIONS):
    with Judge(options, cache_dir=cache) as judge:
        return judge.evaluate(problem(prob) if isinstance(prob, str) else prob, candidate(name))


def test_a_second_judge_takes_the_reference_from_disk_and_a_second_candidate_from_memory(tmp_path):
    first = judged(tmp_path)
    assert (first.status, first.reference_source) == (Status.OK, "computed")
    with Judge(OPTIONS, cache_dir=tmp_path) as judge:
        again = judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
        other = judge.evaluate(problem(SOFTMAX), candidate("softmax_optional_import.py"))
    assert (again.status, again.reference_source) == (Status.OK, "disk")
    assert (other.status, other.reference_source) == (Status.OK, "memory")
    assert [t.max_abs_err for t in again.trials] == [t.max_abs_err for t in first.trials]
    assert again.environment["torch"] == first.environment["torch"]


def test_a_repeat_egg_check_in_a_new_process_skips_the_reference(tmp_path):
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
    assert list((tmp_path / "references").glob("*/*/entry.json"))


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


def entry_files(cache: Path) -> list[Path]:
    return sorted((cache / "references").glob("*/*/*")) if (cache / "references").exists() else sorted(cache.glob("*/*/*"))


@pytest.mark.parametrize("damage", ["truncate_output", "edit_facts", "garbage"])
def test_a_corrupt_entry_is_dropped_and_recomputed(tmp_path, damage, capfd):
    judged(tmp_path)
    files = entry_files(tmp_path)
    output = next(p for p in files if p.suffix == ".bin")
    entry = next(p for p in files if p.name == "entry.json")
    if damage == "truncate_output":
        output.write_bytes(output.read_bytes()[:-4])
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


def test_outputs_too_large_for_the_disk_are_recomputed_beside_the_cached_facts(tmp_path):
    cache = ReferenceCache(tmp_path, max_output_bytes=0)
    assert judged(cache).reference_source == "computed"
    assert not [p for p in entry_files(tmp_path) if p.suffix == ".bin"]
    result = judged(cache)
    assert (result.status, result.reference_source) == (Status.OK, "disk+outputs_recomputed")
    bad = judged(cache, name="cheat_stale_memory.py")
    assert bad.status is Status.MISMATCH  # the recomputed outputs still catch a wrong candidate


def test_beside_recomputed_outputs_the_candidate_runs_its_calls_at_once_and_times_only_after_go(tmp_path):
    """The cached facts make the candidate's plan while the reference's outputs are recomputed; the candidate then
    waits for `go` (the reference's worker gone) before anything is timed."""
    cache = ReferenceCache(tmp_path, max_output_bytes=0)
    first = judged(cache)
    assert "wait_go" not in first.phase_s  # a reference computed in full sends its plan after it ends: nothing to wait for
    again = judged(cache)
    assert (again.status, again.reference_source) == (Status.OK, "disk+outputs_recomputed")
    assert "wait_go" in again.phase_s and list(again.phase_s).index("wait_go") > list(again.phase_s).index("audit")


def test_waiting_for_the_reference_does_not_count_against_the_candidates_run_timeout(tmp_path):
    """A candidate that waits for `go` while a slow reference recomputes its outputs is not timed out for it."""
    slow = tmp_path / "level1" / "23_Softmax.py"
    slow.parent.mkdir()
    slow.write_text((TINY / SOFTMAX).read_text().replace("import torch\n", "import time\n\nimport torch\n", 1)
                    .replace("        return torch.softmax", "        time.sleep(1.0)\n        return torch.softmax"))
    from pipeline.problems.loader import load_problem

    cache = ReferenceCache(tmp_path / "cache", max_output_bytes=0)
    options = dataclasses.replace(OPTIONS, run_timeout_s=2.0)
    assert judged(cache, prob=load_problem(slow), options=options).status is Status.OK
    again = judged(cache, prob=load_problem(slow), options=options)  # the reference's outputs take 4 s to recompute
    assert (again.status, again.reference_source) == (Status.OK, "disk+outputs_recomputed"), again.reason
    assert again.phase_s["wait_go"] > 2.0


def test_a_plan_made_from_stale_facts_restarts_the_candidate_on_the_new_reference(tmp_path):
    """Facts that no longer describe the problem made the candidate's early plan: once the reference is run anew,
    the candidate runs again on its plan, never judged on the stale one."""
    cache = ReferenceCache(tmp_path, max_output_bytes=0)
    judged(cache)
    with Judge(OPTIONS, cache_dir=cache) as judge:
        key = judge._key(problem(SOFTMAX))
        entry = cache.load(key)
        dropped = entry.facts["input_sets"].pop(1)["name"]
        entry.facts["result"]["structure"]["trial_1"]["kind"] = "stale"
        cache.store(key, entry.facts, None)
        result = judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert (result.status, result.reference_source) == (Status.OK, "computed")
    assert dropped in {t.name for t in result.trials}
    assert "wait_go" not in result.phase_s  # the second worker got the whole plan at once


def test_cached_facts_whose_inputs_no_longer_match_are_thrown_away(tmp_path):
    """If a problem's inputs turn out different from the cached run's, the whole reference is run again."""
    cache = ReferenceCache(tmp_path, max_output_bytes=0)
    judged(cache)
    with Judge(OPTIONS, cache_dir=cache) as judge:
        key = judge._key(problem(SOFTMAX))
        entry = cache.load(key)
        entry.facts["result"]["checksums"]["trial_1"] = [123.0]
        cache.store(key, entry.facts, None)
        result = judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert (result.status, result.reference_source) == (Status.OK, "computed")
    assert cache.load(key).facts["result"]["checksums"]["trial_1"] != [123.0]


def test_no_disk_cache_when_asked(tmp_path):
    assert judged(None).reference_source == "computed"
    assert judged(None).reference_source == "computed"


def test_outputs_round_trip_exactly(tmp_path):
    cache = ReferenceCache(tmp_path)
    outputs = {"trial_1": [torch.randn(3, 5), torch.arange(6).reshape(2, 3)], "signed": [torch.randn(4).to(torch.bfloat16)],
               "empty": [torch.empty(0, 2)], "flags": [torch.rand(5) > 0.5]}
    assert cache.store("k" * 64, {"x": 1}, outputs)
    back = cache.load("k" * 64)
    assert back.facts == {"x": 1}
    for name, tensors in outputs.items():
        for got, want in zip(back.outputs[name], tensors):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root, as in CI and on the H200")
def test_a_job_sees_neither_the_reference_cache_nor_another_candidates_compile_cache(tmp_path):
    from .test_isolation import run_in_child

    cache_root = tmp_path / "egg-cache"
    pool = WorkerPool("cpu", root=tmp_path, cache_root=cache_root)
    try:
        ReferenceCache(cache_root / "references").store("k" * 64, {"secret": "reference outputs"}, None)
        pool._sandbox_cache("candidate-other")
        pool.python_paths = isolation.python_paths(exclude=(str(pipeline.ROOT),))
        work = pool.new_workdir("candidate")
        plan = pool.plan(work, (), "candidate-mine")

        def look() -> dict:
            isolation.enter(plan)
            mine = cache_root / "sandbox" / "candidate-mine" / "triton"
            (mine / "kernel.cubin").write_text("compiled")
            return {"references": (cache_root / "references").exists(), "other": (cache_root / "sandbox" / "candidate-other").exists(),
                    "mine_writable": (mine / "kernel.cubin").exists(), "uid": os.getuid()}

        seen = run_in_child(look)
    finally:
        pool.close()
    assert seen == {"references": False, "other": False, "mine_writable": True, "uid": isolation.SANDBOX_UID}
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
