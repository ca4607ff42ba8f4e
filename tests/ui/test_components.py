"""Components are functions of typed values: rendered with AppTest.from_function, their pure parts called directly."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components.candidates import roofline_figure, stage_gains, times_figure
from components.diff import changed_lines, side_by_side, unified
from components.gate import Allowed
from components.plan import validate_plan
from components.verdict import floor_share, speedup_evidence
from pipeline.api import CandidateRow
from pipeline.profiler.ceilings import nominal
from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.report import Classification, Evidence, KernelProfile, ProfileReport
from pipeline.types import Candidate, Check, EvalResult, Problem, Status, Timing

PROBLEM = Problem("/p/23_Softmax.py", "23_Softmax", 1, 23, "pfp")


def timing(ms: float, spread: float = 0.01) -> Timing:
    return Timing(ms, ms, spread, ms - spread, ms + spread, 100, "cuda_events")


def verdict(status: Status = Status.OK) -> EvalResult:
    checks = (Check("correctness", status is Status.OK, "10 calls match" if status is Status.OK else "trial_1: max abs error 0.5"),
              Check("side_stream", True, "event time 1.0 ms"))
    return EvalResult(status, "passed every check" if status is Status.OK else "correctness: trial_1: max abs error 0.5", PROBLEM,
                      Candidate("/c.py", "cfp"), "cuda", checks=checks, timing=timing(1.0) if status is Status.OK else None,
                      baselines={"eager": timing(2.0), "compile": timing(1.005)},
                      speedups={"eager": 2.0, "compile": 1.005} if status is Status.OK else {}, physical_floor_ms=0.5)


def show_verdict(result):
    from components.verdict import render_verdict

    render_verdict(result)


def test_a_verdict_shows_its_interval_and_the_evidence_beside_every_speedup():
    at = AppTest.from_function(show_verdict, args=(verdict(),), default_timeout=30).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"median": "1 ms", "vs eager": "2.000x", "vs compile": "1.005x", "of the physical floor": "50%"}
    captions = " ".join(c.value for c in at.caption)
    assert "95% CI [0.99, 1.01] ms" in captions
    assert "2.000x vs eager: 2 ms [1.99, 2.01] / 1 ms [0.99, 1.01], 100 trials each, cuda_events" in captions
    assert "1.005x vs compile" in captions and "the intervals overlap: within noise" in captions
    assert list(at.dataframe[0].value["check"]) == ["correctness", "side_stream"]


def test_a_failing_verdict_shows_the_failed_check_and_no_speedup():
    at = AppTest.from_function(show_verdict, args=(verdict(Status.MISMATCH),), default_timeout=30).run()
    assert any("max abs error 0.5" in e.value for e in at.error)
    assert [m.label for m in at.metric] == ["median"]  # not timed: no speedup, no floor share
    assert speedup_evidence(verdict(Status.MISMATCH)) == [] and floor_share(verdict()) == 0.5


def test_a_diff_aligns_both_sides_and_counts_changes():
    before, after = "a\nb\nc\n", "a\nB\nc\nd\n"
    rows = side_by_side(before, after)
    assert [(r.left_no, r.left, r.right_no, r.right, r.tag) for r in rows] == [
        (1, "a", 1, "a", "equal"), (2, "b", 2, "B", "replace"), (3, "c", 3, "c", "equal"), (None, "", 4, "d", "insert")]
    assert changed_lines(before, after) == (1, 2)
    assert "-b\n+B\n" in unified(before, after)


def show_diff(before, after):
    from components.diff import render_diff

    render_diff(before, after, before_name="parent kernel")


def test_the_diff_component_has_a_unified_and_a_side_by_side_view():
    at = AppTest.from_function(show_diff, args=("x = 1\n", "x = 2\n"), default_timeout=30).run()
    assert [t.label for t in at.tabs] == ["Side by side", "Unified diff"]
    assert "+x = 2" in at.code[0].value and "1 lines removed, 1 added" in at.caption[0].value


def test_the_side_by_side_diff_has_two_equal_columns_and_highlights_python():
    from components.diff import highlighted_lines, side_by_side_html

    source = 'def f(x):\n    """two\n    lines"""\n    return x + 1  # one\n'
    lines = highlighted_lines(source)
    assert len(lines) == 4 and "<span" in lines[0] and "def" in lines[0] and "&quot;&quot;&quot;two" in lines[1]
    assert lines[2].count("<span") == lines[2].count("</span>")  # a docstring's second line is closed on its own line
    page = side_by_side_html(source, source.replace("+ 1", "+ 2"), "parent kernel")
    assert "table-layout:fixed" in page and page.count("width:calc(50% - 3.5em)") == 2 and "parent kernel" in page
    assert page.count("background:#fff5b1") == 2  # the changed line, on both sides


def test_long_unchanged_runs_fold_so_every_change_is_on_screen():
    from components.diff import folded, side_by_side, side_by_side_html

    before = "".join(f"line {i}\n" for i in range(40))
    after = before.replace("line 20\n", "line twenty\n")
    rows = folded(side_by_side(before, after))
    assert rows[0] == 17 and rows[-1] == 16 and sum(1 for r in rows if not isinstance(r, int)) == 7
    assert "\u22ef 17 unchanged lines" in side_by_side_html(before, after)
    assert folded(side_by_side(before, before)) == side_by_side(before, before)  # nothing changed: nothing folded


def controls(kind, allowed):
    import streamlit as st

    from components.gate import decision_controls

    def chosen(action):
        st.session_state["chosen"] = (action, st.session_state.get("gate_feedback", ""))

    decision_controls(kind, allowed, chosen)


def test_the_decision_controls_report_the_action_and_the_feedback():
    at = AppTest.from_function(controls, args=("kernel", Allowed.for_gate("kernel", has_proposal=True)), default_timeout=30).run()
    assert [b.key for b in at.button] == ["gate_approve", "gate_edit", "gate_reject", "gate_skip", "gate_stop"]
    at.text_area(key="gate_feedback").set_value("use fewer registers")
    at.button(key="gate_reject").click().run()
    assert at.session_state["chosen"] == ("reject", "use fewer registers")


def test_with_nobody_to_read_feedback_there_is_no_reject_and_no_feedback_box():
    for kind in ("plan", "kernel", "verdict"):
        at = AppTest.from_function(controls, args=(kind, Allowed.for_gate(kind, has_proposal=True, feedback_heard=False)), default_timeout=30).run()
        assert at.button(key="gate_reject").disabled and not at.button(key="gate_skip").disabled, kind
        assert not at.text_area, kind
    heard = AppTest.from_function(controls, args=("verdict", Allowed.for_gate("verdict", has_proposal=True)), default_timeout=30).run()
    assert not heard.button(key="gate_reject").disabled and heard.text_area(key="gate_feedback") is not None


def test_nothing_proposed_disables_approve_and_a_verdict_takes_no_edit():
    at = AppTest.from_function(controls, args=("kernel", Allowed.for_gate("kernel", has_proposal=False)), default_timeout=30).run()
    assert at.button(key="gate_approve").disabled and not at.button(key="gate_edit").disabled
    assert not Allowed.for_gate("verdict", has_proposal=True).edit and not Allowed.for_gate("stage_end", True).reject


def test_a_plan_is_validated_against_the_diagnosis_type():
    plan, error = validate_plan('{"bottlenecks": [{"name": "memory_bound", "evidence": [], "fixes": []}]}')
    assert plan is None and error.startswith("not a valid Diagnosis: bottlenecks.0.evidence: List should have at least 1 item")
    assert validate_plan("not json")[1].startswith("not a valid Diagnosis")
    good, error = validate_plan('{"bottlenecks": [{"name": "m", "evidence": [{"metric": "a", "value": "1", "interpretation": "i"}], "fixes": [{"change": "c", "expected_gain_pct": 5}]}]}')
    assert error == "" and good.bottlenecks[0].fixes[0].change == "c"


def report() -> ProfileReport:
    cls = Classification("memory_bound", 20.0, (Evidence("dram_throughput_pct", 85.0, "DRAM at 85% of its peak"),), "memory-bound")
    kernel = KernelProfile("softmax_kernel", duration_ms=1.2, memory_throughput_pct=88.0, sm_throughput_pct=30.0, dram_throughput_pct=85.0,
                           achieved_occupancy_pct=60.0, registers_per_thread=32, metrics={"dram__bytes_read.sum": 1e9}, classification=cls)
    return ProfileReport("ncu", "/c.py", "sha", "/p.py", "pfp", (kernel,), cls, nominal(), ProblemCosts(10**9, 4 * 10**9, ("float32",)),
                         1.2, 0.9)


def show_profile(value, expert):
    from components.profile import render_profile

    render_profile(value, expert=expert)


def test_the_report_has_a_novice_view_of_key_metrics_and_an_expert_view_of_all():
    novice = AppTest.from_function(show_profile, args=(report(), False), default_timeout=30).run()
    expert = AppTest.from_function(show_profile, args=(report(), True), default_timeout=30).run()
    assert "**memory_bound**" in novice.markdown[0].value and "20% from the roofline" in novice.markdown[0].value
    assert list(novice.dataframe[0].value["metric"]) == ["dram_throughput_pct"]  # the class's evidence
    novice_rows, expert_rows = novice.dataframe[1].value, expert.dataframe[1].value
    assert "memory speed of light %" in list(novice_rows["metric"]) and "dram__bytes_read.sum" not in novice_rows.to_string()
    assert "dram__bytes_read.sum" in list(expert_rows["name"]) and len(expert_rows) > len(novice_rows)


def row(cid: int, status: str | None, ms: float | None, stage: str = "algorithm") -> CandidateRow:
    return CandidateRow(cid, stage, "seed", "agent", None, "", status, "", ms, None, None, {}, "t")


def test_the_plots_are_built_from_the_candidates():
    rows = [row(1, "ok", 2.0), row(2, "mismatch", None), row(3, "ok", 1.0, "tiling")]
    assert [t.name for t in times_figure(rows).data] == ["ok", "mismatch (1 not timed)"]
    assert stage_gains(rows, 4.0, {"algorithm": 2.0, "parallel_mapping": 2.0, "tiling": 1.0, "memory": None}) == [
        ("algorithm", 2.0), ("parallel_mapping", 2.0), ("tiling", 4.0)]
    figure = roofline_figure(rows, nominal(), ProblemCosts(10**9, 4 * 10**9, ("float32",)), "fp32")
    points = figure.data[1]
    assert list(points.x) == [0.25, 0.25] and [round(y, 3) for y in points.y] == [0.5, 1.0]  # 1 GFLOP in 2 and 1 ms
    memory = roofline_figure(rows, nominal(), ProblemCosts(0, 4 * 10**9, ("float32",)), "fp32")  # no FLOPs: the memory roof
    assert list(memory.data[0].x) == ["candidate 1", "candidate 3"] and [round(y) for y in memory.data[0].y] == [2000, 4000]
    assert memory.layout.shapes[0].y0 == nominal().copy_bytes_per_s / 1e9  # the roof drawn, not invented
    assert roofline_figure([row(2, "mismatch", None)], nominal(), ProblemCosts(0, 10, ("float32",)), "fp32") is None  # nothing timed
    untimed = times_figure([row(1, "ok", None), row(2, "mismatch", None)])  # the CPU times nothing: nothing is plotted
    assert untimed is None
    assert all(y is not None for trace in times_figure(rows).data for y in trace.y)  # only timed candidates have a height


def test_a_verdict_says_what_it_did_against_its_parent():
    from components.gate import against_parent

    assert "**1.25x faster**, 0.8 ms" in against_parent(0.8, 1.0, 3, "ok")
    assert "**1.25x slower**, 1.25 ms" in against_parent(1.25, 1.0, 3, "ok") and "candidate 3 (1 ms)" in against_parent(1.25, 1.0, 3, "ok")
    assert "the same speed" in against_parent(1.001, 1.0, 3, "ok")
    assert "no times to compare" in against_parent(None, None, 3, "ok")


def test_the_speed_of_light_bars_are_drawn_without_a_chart_library():
    from components.profile import sol_bars_html

    page = sol_bars_html(report().kernels)
    assert "softmax_kernel" in page and "width:88.0%" in page and "width:30.0%" in page and ">88%<" in page and ">30%<" in page
    assert sol_bars_html(()) is None


def test_readings_carry_units_that_keep_them_readable():
    from components.profile import reading
    from pipeline.profiler.report import bytes_text, time_text

    assert time_text(1.905e-06) == "1.905 ns" and time_text(0.0123) == "12.3 us" and time_text(4.5) == "4.5 ms"
    assert bytes_text(4096) == "4.096 KB" and bytes_text(2.5e9) == "2.5 GB" and bytes_text(12) == "12 B"
    assert reading("analytic_floor_ms", 1.905e-06) == "1.905 ns" and reading("waves", 0.0081234) == "0.008123" and reading("x", "16") == "16"


def test_the_gains_plot_keeps_room_for_its_labels():
    from components.candidates import stage_gains_figure

    for gains in ([("algorithm", 0.6), ("parallel_mapping", 0.8)], [("algorithm", 2.0), ("tiling", 3.5)]):
        figure = stage_gains_figure(gains)
        low, high = figure.layout.yaxis.range
        assert low == 0 and high >= 1.15 * max(1.0, *(g for _, g in gains))  # the bars' text and the eager line fit
        [label] = figure.layout.annotations
        assert label.text == "eager (1x)" and label.yanchor == "top"  # under the line, inside the plot


def show_outcome(outcome):
    from components.session import render_outcome

    render_outcome(outcome)


def test_a_kept_kernel_slower_than_compile_says_so_with_its_reason_beside_the_headline():
    note = "slower than torch.compile (0.700x: the kernel 1 ms, torch.compile 700 us): the kernel takes 5.0x its physical floor of 200 us"
    outcome = {"headline": "a verified kernel, 2.000x vs eager, 0.700x vs compile", "keeps_reference": False, "best_is_reference": False,
               "versus_compile": note}
    at = AppTest.from_function(show_outcome, args=(outcome,), default_timeout=30).run()
    assert [s.value for s in at.success] == [outcome["headline"]] and [w.value for w in at.warning] == [note]
    at = AppTest.from_function(show_outcome, args=({**outcome, "versus_compile": ""},), default_timeout=30).run()
    assert not at.warning and [s.value for s in at.success] == [outcome["headline"]]


def test_the_bench_table_puts_slower_than_compile_first_in_what_happened():
    from components.bench import table_rows

    base = {"problem": "p", "level": 1, "status": "done", "correct": True, "keeps_reference": False, "headline": "a verified kernel"}
    [slow, fast] = table_rows([{**base, "versus_compile": "slower than torch.compile (0.700x): no physical floor on record"}, base])
    assert slow["what happened"] == "slower than torch.compile (0.700x): no physical floor on record · a verified kernel"
    assert fast["what happened"] == "a verified kernel"
