"""The fourth red team (session 13, a helper that had seen none of these fixtures) attacked what landed that day:
the tuning engine's measuring worker and compile pool and the profiler's survey, through the judge's launcher. Of
its 20 attempts the sandbox held every one made from inside (namespaces, uid, environment, network); what got
through went around it, in the parent: a configuration compiled in the tuning engine's own process, files of the
launcher's in the job's writable folder (written through a job's links by root, read back through links and
FIFOs), and replies parsed without bounds. Each is a fixture here (tests/fixtures/redteam4), caught as data:
the parent never raises, hangs, writes outside, or shows a file the job could not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.profiler.survey import survey_candidate
from pipeline.tuning.measure import BatchMeasurer, MeasureError, MeasureSettings
from pipeline.tuning.prune import PrunedEvaluator, Sm90Compiler
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec
from pipeline.tuning.scripted import ScriptedEvaluator
from pipeline.tuning.space import Config

from .conftest import TINY

REDTEAM4 = Path(__file__).resolve().parents[1] / "fixtures" / "redteam4"
ROW_SUM = LaunchRecipe("row_sum_kernel", {"x_ptr": TensorSpec((6, 24)), "out_ptr": TensorSpec((6,), output=True), "n_cols": 24}, grid="(6,)")
CPU = MeasureSettings(device="cpu", config_timeout_s=60, setup_timeout_s=60)
SECRET = "sk-fourth-red-team"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks aim at root's writes and reads, as in CI and on the H200")


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A folder no job may reach, with a file in it that only its owner may read, and a key in the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text("untouched")
    (folder / "secret.txt").write_text(SECRET)
    (folder / "secret.txt").chmod(0o600)
    return folder


def aimed(name: str, outside: Path, folder: Path, **words: str) -> Path:
    text = (REDTEAM4 / name).read_text().replace("OUTSIDE", str(outside))
    for word, value in words.items():
        text = text.replace(word, value)
    path = folder / name
    path.write_text(text)
    return path


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "victim.txt"], sorted(outside.iterdir())
    assert (outside / "victim.txt").read_text() == "untouched"


def test_every_attempt_of_the_fourth_red_team_is_a_fixture_here():
    assert {p.name for p in REDTEAM4.glob("*.py")} == {
        "a02_restart_symlinks.py", "a04_survey_log_link.py", "a05_survey_result_forged.py", "a07_compile_hang.py",
        "a08_infinity_reply.py", "a09_compile_deep_answer.py", "a11_one_config_compile.py", "a12_cache_symlink.py",
        "a14_ncu_report_link.py"}


@needs_root
@pytest.mark.parametrize("workers", [0, 2])
def test_one_configuration_is_compiled_in_the_sandbox_too(outside, tmp_path, workers):
    kernel = aimed("a11_one_config_compile.py", outside, tmp_path)
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), Sm90Compiler(str(kernel), ROW_SUM), workers=workers) as pruner:
        (result,) = pruner.evaluate([Config(BLOCK=32, num_warps=1)])
    assert result.status.value == "ok", result.detail
    untouched(outside)


def test_a_kernel_file_is_never_imported_in_the_parent():
    with pytest.raises(RuntimeError, match="runs only in a sandboxed compile worker"):
        Sm90Compiler(str(REDTEAM4 / "a11_one_config_compile.py"), ROW_SUM).compile(Config(BLOCK=32))


@needs_root
@pytest.mark.parametrize("name", ["a02_restart_symlinks.py", "a12_cache_symlink.py"])
def test_a_restarted_worker_gets_a_fresh_folder_and_nothing_is_written_through_a_jobs_links(outside, tmp_path, name):
    kernel = aimed(name, outside, tmp_path)
    with BatchMeasurer(kernel, ROW_SUM, CPU) as measurer:
        results = measurer.evaluate([Config(BLOCK=32), Config(BLOCK=64)])
    # each incarnation starts in a fresh folder, so none finds what the one before planted: each dies as the first
    assert [r.status.value for r in results] == ["runtime_error", "runtime_error"], [r.detail for r in results]
    assert all("the worker died (exit code 3)" in r.detail for r in results)
    untouched(outside)


def test_numbers_and_nesting_no_parser_should_take_end_the_workers_turn_not_the_parent(outside, tmp_path):
    kernel = aimed("a08_infinity_reply.py", outside, tmp_path)
    with BatchMeasurer(kernel, ROW_SUM, CPU) as measurer:
        results = measurer.evaluate([Config(BLOCK=32)])
    assert results[0].status.value == "runtime_error" and results[0].time_ms is None, results[0].detail


def test_a_compile_workers_forged_answers_fail_its_configurations(outside, tmp_path):
    kernel = aimed("a09_compile_deep_answer.py", outside, tmp_path)
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), Sm90Compiler(str(kernel), ROW_SUM), workers=2) as pruner:
        results = pruner.evaluate([Config(BLOCK=32, num_warps=1), Config(BLOCK=64, num_warps=2)])
    assert [r.status.value for r in results] == ["compile_error", "compile_error"]
    assert all("the compile worker died" in r.detail for r in results), [r.detail for r in results]


def test_a_compile_worker_that_never_answers_times_out(outside, tmp_path):
    kernel = aimed("a07_compile_hang.py", outside, tmp_path)
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), Sm90Compiler(str(kernel), ROW_SUM), workers=1, compile_timeout_s=5) as pruner:
        results = pruner.evaluate([Config(BLOCK=32, num_warps=1)])
    assert results[0].status.value == "compile_error" and "timed out after 5 s" in results[0].detail, results[0].detail


@needs_root
@pytest.mark.parametrize("mode", ["link", "fifo"])
def test_the_surveys_log_is_the_launchers_own_never_one_the_job_replaced(outside, tmp_path, mode):
    candidate = aimed("a04_survey_log_link.py", outside, tmp_path, MODE=mode)
    survey = survey_candidate(candidate, TINY / "degenerate" / "2_ReLU.py", timeout_s=60)
    assert survey.errors and "the process exited with 1" in survey.errors[0], survey.errors
    assert SECRET not in " ".join(survey.errors)
    untouched(outside)


@pytest.mark.parametrize("shape", ["this is not JSON", "[1]", '{"launches": 5}', "NaN"])
def test_a_survey_result_the_candidate_wrote_is_no_survey(outside, tmp_path, shape):
    candidate = aimed("a05_survey_result_forged.py", outside, tmp_path, SHAPE=repr(shape))
    survey = survey_candidate(candidate, TINY / "degenerate" / "2_ReLU.py", timeout_s=60)
    assert survey.errors and "no result that reads as one" in survey.errors[0], survey.errors
    assert not survey.launches


@needs_root
def test_an_ncu_report_that_is_a_link_is_not_read(outside, tmp_path):
    from pipeline.judge.sandbox import clean_environment
    from pipeline.profiler import ncu
    from pipeline.profiler.profiling import ProfileOptions, write_spec

    (tmp_path / "tool").mkdir()  # NCU's own folder, apart from the job's (as on a real machine)
    fake = aimed("a14_ncu_report_link.py", outside, tmp_path / "tool")
    fake.chmod(0o755)
    job = tmp_path / "job"
    job.mkdir()
    spec = write_spec(job, str(fake), str(fake), "ncu", ProfileOptions())
    run = ncu.collect(str(fake), job, spec, clean_environment("cuda"), timeout_s=60, keep_dir=tmp_path)
    assert run.error == "the NCU report is not a regular file under 512 MB" and not run.report_path, run
    assert not (tmp_path / "profile.ncu-rep").exists()
    untouched(outside)


# The fifth team (session 13, after the fixes above, a helper that had seen none of these fixtures): 8 attempts;
# the sandbox held all, 4 made the parent hang, grow without bound or raise. Each is a fixture in
# tests/fixtures/redteam5, caught as data.
REDTEAM5 = REDTEAM4.parent / "redteam5"


def test_a_flood_of_replies_ends_the_workers_turn_and_stays_bounded():
    from pipeline.tuning import measure

    with BatchMeasurer(REDTEAM5 / "b2_reply_flood.py", ROW_SUM, CPU) as measurer:
        measurer.start()
        import time

        time.sleep(3)  # the flood has begun: the reader stops at the queue's bound, the worker is killed
        assert measurer._replies.qsize() <= measure.MAX_QUEUED_REPLIES
        results = measurer.evaluate([Config(BLOCK=32) for _ in range(3)])
    assert all(r.status.value in ("runtime_error", "ok", "timeout") for r in results)
    assert measurer._replies.qsize() <= measure.MAX_QUEUED_REPLIES


def test_a_hung_compile_worker_with_hundreds_of_configurations_times_out():
    configs = [Config(BLOCK=32, num_warps=w, num_stages=s) for w in (1, 2, 4, 8) for s in range(1, 76)]
    with PrunedEvaluator(ScriptedEvaluator(lambda c: 1.0), Sm90Compiler(str(REDTEAM5 / "b3_hang_many_configs.py"), ROW_SUM),
                         workers=2, compile_timeout_s=3) as pruner:
        results = pruner.evaluate(configs)
    assert len(results) == 300 and all(r.status.value == "compile_error" and "timed out" in r.detail for r in results)


def test_a_forged_capture_is_a_capture_error():
    from pipeline.expert.capture import CaptureError, capture

    with pytest.raises(CaptureError):
        capture((REDTEAM5 / "b1_capture_forged_tape.py").read_text(), use_cache=False)


def test_a_survey_with_numbers_no_survey_has_is_no_survey():
    survey = survey_candidate(REDTEAM5 / "b4_survey_huge_ints.py", TINY / "degenerate" / "2_ReLU.py", timeout_s=60)
    assert survey.errors and "no result that reads as one" in survey.errors[0] and not survey.launches, survey.errors


@pytest.mark.parametrize("body", [b"{}", b"0", b"[]"])
def test_a_job_file_of_millions_of_tiny_values_is_refused_before_it_is_parsed(tmp_path, body):
    """64 MB of empty objects once cost the parent about 1.6 GB to parse; now it is counted first and refused."""
    import tracemalloc

    from pipeline.judge import launcher

    path = tmp_path / "result.json"
    count = (48 << 20) // (len(body) + 1)
    path.write_bytes(b"[" + b",".join([body] * count) + b"]")
    tracemalloc.start()
    try:
        assert launcher.read_job_json(path) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 120 << 20, peak  # the file itself (48 MB) and little more
    small = tmp_path / "small.json"
    small.write_bytes(b"[" + b",".join([body] * 1000) + b"]")
    assert len(launcher.read_job_json(small)) == 1000
