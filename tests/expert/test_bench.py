"""bench/expert_h200.py without a GPU: the run's files and the rule that egg keeps the reference when nothing
beats eager (the GPU run itself is for the H200, see bench/README.md)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.expert.problems import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("expert_h200", ROOT / "bench" / "expert_h200.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["expert_h200"] = module
    spec.loader.exec_module(module)
    return module


def row(eager: float, compiled: float, *medians: float | None) -> dict:
    candidates = [{"label": f"seed {i}", "rules": "r", "status": "ok" if m else "mismatch", "median_ms": m, "speedups": {}}
                  for i, m in enumerate(medians, 1)]
    return {"baselines": {"eager": eager, "compile": compiled}, "candidates": candidates}


def test_the_fastest_passing_candidate_is_the_answer_and_the_reference_when_nothing_wins(bench):
    won = bench.answer(row(2.0, 1.6, 1.5, 0.8, None), "seeds")
    assert not won["kept_reference"] and won["egg_ms"] == 0.8 and won["egg_vs_eager"] == 2.5 and won["egg_vs_compile"] == 2.0
    slower = bench.answer(row(1.0, 0.9, 1.2), "seeds")
    assert slower["kept_reference"] and slower["egg_vs_eager"] == 1.0 and slower["egg_vs_compile"] == 0.9
    assert "slower than eager" in slower["why"]
    none = bench.answer(row(1.0, 0.9, None), "seeds")
    assert none["kept_reference"] and not none["correct"] and none["why"] == "no candidate passed the judge"
    assert bench.geomean([2.0, 0.5, None]) == pytest.approx(1.0)


def test_problems_are_interleaved_across_levels_and_sharded(bench):
    order = [bench.key(p) for p in bench.problems("suite", set(), set())]
    assert order[:3] == ["level1/1_GEMM_Square", "level2/1_Linear_GELU_Scale", "level3/1_MLP_3Layer"]
    assert len(order) == 37 and len(set(order)) == 37


def test_a_cpu_run_writes_its_results_and_summary(bench, tmp_path):
    out = tmp_path / "out"
    assert bench.main(["--out", str(out), "--device", "cpu", "--problems", "tiny", "--only", "23_Softmax,11_GroupNorm",
                       "--seeds", "2", "--shard", "0/1"]) == 0
    report = json.loads((out / "expert_h200.json").read_text())
    assert [r["problem"] for r in report["results"]] == ["level1/11_GroupNorm", "level1/23_Softmax"]
    for result in report["results"]:
        assert result["correct"] and [c["status"] for c in result["candidates"]] == ["ok", "ok"]
    assert "## Per level" in (out / "expert_h200.md").read_text()
    winners = json.loads((out / "expert_h200_winners.json").read_text())
    assert all("@triton.jit" in source for source in winners.values()) and winners
    merged = tmp_path / "merged"
    assert bench.main(["--merge", str(out / "expert_h200.json"), "--out", str(merged)]) == 0
    assert len(json.loads((merged / "expert_h200.json").read_text())["results"]) == 2
