"""A kept kernel slower than torch.compile says so, with the profiler's reason, in one wording everywhere: the
CLI's summary, report.md, best.py, evidence.json, the session's stored outcome and egg bench's results."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

from pipeline.bench.results import report as bench_report
from pipeline.bench.results import row_for
from pipeline.llm.accounting import Ledger
from pipeline.problems.loader import fingerprint_text, load_problem
from pipeline.report.compile_gap import NO_PROFILE, versus_compile
from pipeline.report.optimize import Outcome, write_outputs
from pipeline.sessions.runner import outcome_summary, winner_profile
from pipeline.stages.method import Progress
from pipeline.store import Store
from pipeline.store.records import BenchRunRecord
from pipeline.types import Candidate, EvalOptions, EvalResult, Status, Timing, to_jsonable
from tests.bench.test_metrics import item, session

SOFTMAX = Path(__file__).resolve().parents[2] / "data" / "problems" / "suite" / "level1" / "23_Softmax.py"
SOURCE = "# the candidate\nclass ModelNew: pass\n"
PROFILE = {"source": "ncu", "floor_ms": 0.25, "overall": {"kind": "memory_bound", "roofline_distance_pct": 75.0, "evidence": [],
                                                          "summary": "memory-bound: memory side at 41% of peak", "predicted": False}}


def timing(ms: float) -> Timing:
    return Timing(ms, ms, 0.01, ms - 0.01, ms + 0.01, 100, "cuda_events")


def outcome(compile_ms: float | None, profile: dict | None = None, eager_ms: float = 2.0) -> Outcome:
    """A verified kernel of 1 ms against eager at `eager_ms` and torch.compile at `compile_ms` (None: not timed)."""
    problem = load_problem(SOFTMAX)
    baselines = {"eager": timing(eager_ms)} | ({"compile": timing(compile_ms)} if compile_ms else {})
    final = EvalResult(Status.OK, "passed every check", problem, Candidate("/c.py", "fp"), "cuda", timing=timing(1.0), baselines=baselines,
                       speedups={name: t.median_ms / 1.0 for name, t in baselines.items()}, physical_floor_ms=0.2,
                       environment={"gpu": "NVIDIA H100"})
    progress = Progress(best_id=7, best_source=SOURCE, best_ms=1.0, best_result=final)
    reference = {"baselines": {name: to_jsonable(t) for name, t in baselines.items()}}
    return Outcome(problem, "s1", EvalOptions(device="cuda"), "expert", progress, final, Ledger(), reference, 0, verify_seed=1,
                   profile=profile)


def test_the_wording_for_faster_slower_and_no_compile_baseline():
    assert versus_compile({"eager": 2.0, "compile": 1.2}, kernel_ms=1.0, compile_ms=1.2) == ""
    assert versus_compile({"eager": 2.0, "compile": 1.0}) == ""  # as fast as torch.compile is not slower
    assert versus_compile({"eager": 2.0}) == ""  # no torch.compile baseline timed
    assert versus_compile({}) == "" and versus_compile(None) == ""
    assert versus_compile({"eager": 2.0, "compile": 0.7}, kernel_ms=1.0, compile_ms=0.7, floor_ms=0.2) == (
        f"slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): the kernel takes 5.0x its physical floor of 200 us; {NO_PROFILE}")
    assert versus_compile({"compile": 0.7}, kernel_ms=1.0, compile_ms=0.7, floor_ms=0.2, profile=PROFILE) == (
        "slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): the kernel takes 5.0x its physical floor of 200 us; "
        "the profiler (hardware counters) says memory-bound: memory side at 41% of peak")
    # the profile's floor where the judge gave none; a kernel at its floor says so
    assert "takes 4.0x its physical floor of 250 us" in versus_compile({"compile": 0.5}, kernel_ms=1.0, profile=PROFILE)
    assert "the kernel runs at its physical floor of 1 ms" in versus_compile({"compile": 0.9}, kernel_ms=1.05, floor_ms=1.0)
    assert versus_compile({"compile": 0.29}) == f"slower than torch.compile (0.290x): no physical floor on record; {NO_PROFILE}"


def test_outcome_says_it_only_for_a_kept_kernel_slower_than_compile():
    assert outcome(compile_ms=1.5).versus_compile() == ""
    assert outcome(compile_ms=None).versus_compile() == ""
    assert outcome(compile_ms=0.7, eager_ms=0.8).versus_compile() == ""  # best.py is the reference: no kernel kept
    assert outcome(compile_ms=0.7).versus_compile().startswith("slower than torch.compile (0.700x")


def test_report_best_py_and_evidence_say_it_with_the_profilers_reason(tmp_path):
    slow = outcome(compile_ms=0.7, profile=PROFILE)
    write_outputs(tmp_path, slow)
    report = (tmp_path / "report.md").read_text()
    assert ("**Slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): the kernel takes 5.0x its physical floor of 200 us; "
            "the profiler (hardware counters) says memory-bound: memory side at 41% of peak.**") in report
    assert "# slower than torch.compile (0.700x" in (tmp_path / "best.py").read_text()
    assert json.loads((tmp_path / "evidence.json").read_text())["versus_compile"] == slow.versus_compile()
    fast = outcome(compile_ms=1.5)
    write_outputs(tmp_path, fast)
    assert "torch.compile" not in (tmp_path / "report.md").read_text().split("## Stages")[0]
    assert json.loads((tmp_path / "evidence.json").read_text())["versus_compile"] == ""


def test_without_a_profile_the_report_says_none_was_taken(tmp_path):
    write_outputs(tmp_path, outcome(compile_ms=0.7))
    assert f"the kernel takes 5.0x its physical floor of 200 us; {NO_PROFILE}.**" in (tmp_path / "report.md").read_text()


def test_the_cli_summary_says_it(tmp_path, monkeypatch):
    from pipeline import api
    from pipeline.cli import app

    slow = outcome(compile_ms=0.7, profile=PROFILE)
    monkeypatch.setattr(api, "optimize", lambda *args, **kwargs: slow)
    script = tmp_path / "script.yaml"
    script.write_text("{}\n")
    result = CliRunner().invoke(app, ["optimize", str(SOFTMAX), "--script", str(script), "--device", "cpu", "--out", str(tmp_path)],
                                env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert slow.versus_compile() in result.output
    assert "slower than torch.compile (0.700x" in result.output and "memory-bound: memory side at 41% of peak" in result.output
    monkeypatch.setattr(api, "optimize", lambda *args, **kwargs: outcome(compile_ms=1.5))
    result = CliRunner().invoke(app, ["optimize", str(SOFTMAX), "--script", str(script), "--device", "cpu", "--out", str(tmp_path)],
                                env={"COLUMNS": "400"})
    assert result.exit_code == 0 and "slower than torch.compile" not in result.output


def test_the_session_finds_the_winners_stored_profile_and_keeps_the_words(tmp_path):
    store = Store(tmp_path / "egg.sqlite")
    slow = outcome(compile_ms=0.7)
    environment_fp = hashlib.sha256(json.dumps(slow.final.environment, sort_keys=True).encode()).hexdigest()[:16]
    assert winner_profile(store, slow.problem, SOURCE, slow.progress.best_result, slow.final) is None
    store.save_profile(slow.problem.fingerprint, fingerprint_text("# another kernel\n"), environment_fp, {"source": "ncu"})
    assert winner_profile(store, slow.problem, SOURCE, slow.final) is None  # another kernel's profile is not the winner's
    store.save_profile(slow.problem.fingerprint, fingerprint_text(SOURCE), environment_fp, PROFILE)
    assert winner_profile(store, slow.problem, SOURCE, None, slow.final) == PROFILE
    assert winner_profile(store, slow.problem, None, slow.final) is None
    store.close()
    profiled = outcome(compile_ms=0.7, profile=PROFILE)
    assert outcome_summary(profiled)["versus_compile"] == profiled.versus_compile() != ""
    assert outcome_summary(outcome(compile_ms=1.5))["versus_compile"] == ""


def test_bench_results_list_the_kernels_slower_than_compile():
    slow = outcome_summary(outcome(compile_ms=0.7, profile=PROFILE))
    fast = outcome_summary(outcome(compile_ms=1.5))
    table = [row_for(item("level1/slow", 1), session(slow)), row_for(item("level1/fast", 1), session(fast))]
    assert table[0]["versus_compile"] == slow["versus_compile"] and table[1]["versus_compile"] == ""
    text = bench_report(BenchRunRecord("r1", "t", "/out", ["KernelBench"], {"device": "cuda"}, "done", "x"), table)
    assert "1 of the 2 kernels kept as best.py are slower than torch.compile" in text
    assert "## Slower than torch.compile" in text and f"- level1/slow: {slow['versus_compile']}" in text
    # a session from before the words were stored: the same wording from its numbers
    old = {k: v for k, v in slow.items() if k != "versus_compile"}
    assert row_for(item("level1/old", 1), session(old))["versus_compile"].startswith("slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us)")
