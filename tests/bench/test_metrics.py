"""The suite's numbers from rows: fast_p, the geomeans with a failure counted as the reference, the intervals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.bench.results import fast_p, geomean, kernel_or_reference, report, row_for, summary
from pipeline.store.records import BenchItemRecord, BenchRunRecord, SessionRecord

TINY = Path(__file__).resolve().parents[2] / "data" / "problems" / "tiny"


def timing(ms: float, spread: float = 0.01) -> dict:
    return {"median_ms": ms, "ci95_low_ms": ms - spread, "ci95_high_ms": ms + spread, "trials": 100, "method": "cuda_events"}


def session(outcome: dict) -> SessionRecord:
    return SessionRecord("s1", "t", "/p.py", "p", "fp", {"kind": "expert", "describe": "expert backend (no model)"}, "auto", "cuda", {},
                         "done", "", "", None, None, "", None, None, False, "", outcome, {}, None)


def item(problem: str, level: int, status: str = "done") -> BenchItemRecord:
    return BenchItemRecord("r1", problem, f"/{problem}.py", level, 0, "s1", status, "", "0", 10.0, None, None, {})


def outcome(kernel_ms: float | None, eager_ms: float = 1.0, compile_ms: float = 0.5, keeps_reference: bool | None = None) -> dict:
    ok = kernel_ms is not None
    return {"final_status": "ok" if ok else None, "best_is_reference": not ok,
            "keeps_reference": (not ok or kernel_ms >= eager_ms) if keeps_reference is None else keeps_reference,
            "timing": timing(kernel_ms) if ok else None, "baselines": {"eager": timing(eager_ms), "compile": timing(compile_ms)},
            "speedups": {"eager": eager_ms / kernel_ms, "compile": compile_ms / kernel_ms} if ok else {},
            "stages": [{"stage": "algorithm", "median_ms": kernel_ms * 1.5, "candidate_id": 1}, {"stage": "tiling", "median_ms": kernel_ms, "candidate_id": 2}] if ok else [],
            "llm": {"calls": 3, "input_tokens": 100, "output_tokens": 50, "cost_usd": 0.01}, "headline": "h"}


@pytest.fixture
def table():
    return [
        row_for(item("level1/a", 1), session(outcome(0.25))),  # 4x eager, 2x compile
        row_for(item("level1/b", 1), session(outcome(0.8))),  # 1.25x eager, 0.625x compile
        row_for(item("level1/c", 1), session(outcome(2.0))),  # correct but slower than eager: best.py is the reference
        row_for(item("level2/d", 2), session(outcome(None, compile_ms=0.8))),  # no kernel passed
        row_for(item("level2/e", 2, "crashed"), None),  # the worker died: nothing known
    ]


def test_a_row_holds_the_kernels_speedups_with_their_intervals_and_best_pys(table):
    a, b, c, d, e = table
    assert a["correct"] and a["speedup_eager"] == 4.0 and a["speedup_compile"] == 2.0
    assert a["speedup_eager_ci95"] == [round(0.99 / 0.26, 4), round(1.01 / 0.24, 4)]  # the widest ratio of the two intervals
    assert a["answer_speedup_eager"] == 4.0 and not a["keeps_reference"]
    assert c["correct"] and c["speedup_eager"] == 0.5 and c["answer_speedup_eager"] == 1.0  # best.py is the reference
    assert c["answer_speedup_compile"] == 0.5  # the reference against torch.compile: compile / eager
    assert not d["correct"] and d["speedup_eager"] is None and d["answer_speedup_eager"] == 1.0 and d["answer_speedup_compile"] == 0.8
    assert not e["correct"] and e["eager_ms"] is None and e["status"] == "crashed"
    assert a["llm_calls"] == 3 and a["cost_usd"] == 0.01


def test_fast_p_counts_every_problem_and_only_verified_kernels_above_p(table):
    assert fast_p(table, 0.0) == 3 / 5  # the share correct
    assert fast_p(table, 0.5) == 2 / 5  # 0.5x is not above 0.5
    assert fast_p(table, 1.0) == 2 / 5
    assert fast_p(table, 1.5) == 1 / 5
    assert fast_p(table, 1.0, "compile") == 1 / 5
    assert fast_p(table, 2.0, "compile") == 0.0  # 2x is not above 2
    assert fast_p([], 1.0) is None
    untimed = [dict(r, eager_ms=None) for r in table]
    assert fast_p(untimed, 1.0) is None and fast_p(untimed, 0.0) == 3 / 5


def test_the_geomean_counts_a_failure_as_the_reference(table):
    eager = [kernel_or_reference(r, "eager") for r in table]
    assert eager == [4.0, 1.25, 0.5, 1.0, 1.0]
    assert geomean(eager) == pytest.approx(math.exp((math.log(4) + math.log(1.25) + math.log(0.5)) / 5))
    compile_ = [kernel_or_reference(r, "compile") for r in table]
    assert compile_ == [2.0, 0.625, 0.25, 0.8, None]  # a crash before any baseline has no torch.compile time
    assert summary(table)["fast_1"] == 2 and summary(table)["correct"] == 3


def test_the_report_has_every_section_with_these_numbers(table):
    run = BenchRunRecord("r1", "2026-12-03", "/out", ["KernelBench"], {"device": "cuda", "backend": "expert", "executor": "local", "slots": ["0"]}, "done", "x")
    text = report(run, table)
    assert "| level 1 | eager | 3 | 100% | 67% | 67% | 67% | 33% | 33% |" in text
    assert "| level 2 | compile | 2 | 0% | 0% | 0% | 0% | 0% | 0% |" in text
    assert "| all | eager | 5 | 60% | 40% | 40% | 40% | 20% | 20% |" in text
    g1 = math.exp((math.log(4) + math.log(1.25) + math.log(0.5)) / 3)
    assert f"| level 1 | 3 | {(4 + 1.25 + 0.5) / 3:.3f}x / {g1:.3f}x |" in text
    assert "| level 2 | 2 | 1.000x / 1.000x | 0.800x (1 without a baseline) |" in text
    assert "| tiling |" in text and "| algorithm |" in text
    assert "12 model calls" in text and "crashed 1, done 4" in text


def test_a_file_name_cannot_add_a_row_or_a_cell_to_the_report(table):
    """The sixth red team named a problem `2_Fake | 1 | done | yes | 9.999x ... |` plus a line break: a fake row."""
    forged = "level1/2_Fake | 1 | done | yes | 9.999x (9.90-10.10) | 3.333x |\n| 3_pad"
    rows = [dict(table[0], problem=forged, story="a | b\n| c")]
    run = BenchRunRecord("r1", "t", "/out", ["x|y"], {}, "done", None)
    text = report(run, rows)
    problem_rows = [line for line in text.splitlines() if line.startswith("| ") and ("2_Fake" in line or "3_pad" in line)]
    assert all(("2_Fake" in line) == ("3_pad" in line) for line in text.splitlines())  # never split over two lines
    assert len(problem_rows) == 1 and problem_rows[0].count(" | ") == 8  # one row of nine cells
    assert "2_Fake \\| 1 \\| done" in problem_rows[0]


def test_a_file_name_that_is_not_utf8_is_skipped_not_a_traceback(tmp_path):
    import os

    from pipeline.bench.problems import discover

    source = (TINY / "level1" / "15_Swish.py").read_text()
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_ok.py").write_text(source)
    with open(os.path.join(os.fsencode(tmp_path / "level1"), b"2_bad\xff.py"), "w") as handle:
        handle.write(source)
    skipped = []
    assert [p.name for p in discover([tmp_path], skipped=skipped)] == ["level1/1_ok"]
    assert len(skipped) == 1 and os.fsencode(skipped[0]).endswith(b"2_bad\xff.py")
