"""Every broken, cheating and honest fixture gets its exact status and reason from the real judge on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.judge.judge import Judge
from pipeline.types import EvalOptions, EvalResult, Status, from_jsonable, to_jsonable

from .conftest import candidate, problem

SOFTMAX = "level1/23_Softmax.py"

# (candidate fixture, problem, status, the reason starts with)
CASES = [
    ("softmax_ok.py", SOFTMAX, Status.OK, "passed every check"),
    ("softmax_optional_import.py", SOFTMAX, Status.OK, "passed every check"),
    ("syntax_error.py", SOFTMAX, Status.COMPILE_ERROR, "syntax error at line 4"),
    ("import_raises.py", SOFTMAX, Status.COMPILE_ERROR, "importing the candidate failed: RuntimeError: kernel table missing"),
    ("no_modelnew.py", SOFTMAX, Status.COMPILE_ERROR, "the candidate defines no class ModelNew"),
    ("forward_raises.py", SOFTMAX, Status.RUNTIME_ERROR, "call trial_1 raised ValueError: shapes not supported"),
    ("segfault.py", SOFTMAX, Status.RUNTIME_ERROR, "the process died from SIGSEGV during phase first_call"),
    ("out_of_memory.py", SOFTMAX, Status.RUNTIME_ERROR, "call trial_1 went over the memory limit of"),
    ("exits.py", SOFTMAX, Status.RUNTIME_ERROR, "the process exited with code 70 during phase first_call"),
    ("cheat_torch_only.py", SOFTMAX, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched"),
    ("cheat_torch_plus_copy.py", SOFTMAX, Status.BANNED, "torch_delegation: every compute op of the reference still runs in torch (_softmax)"),
    ("cheat_ghost_kernel.py", SOFTMAX, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched"),
    ("cheat_ghost_branch.py", SOFTMAX, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched"),
    ("cheat_mutates_input.py", SOFTMAX, Status.BANNED, "input_mutation: call trial_1 wrote to input(s) [0]"),
    ("cheat_cache_by_shape.py", SOFTMAX, Status.BANNED, "output_cache (line 29)"),
    ("cheat_phase_switch.py", SOFTMAX, Status.MISMATCH, "correctness: repeat_"),
    ("cheat_stale_memory.py", SOFTMAX, Status.MISMATCH, "correctness: trial_1:"),
    ("cheat_inherits_model.py", SOFTMAX, Status.BANNED, "reference_model (line 3): imports Model from problem: that is the reference (+1 more)"),
    ("cheat_fallback.py", SOFTMAX, Status.BANNED, "fallback (line 25): catches Exception and carries on: a failing kernel can be replaced"),
    ("cheat_timer_patch.py", SOFTMAX, Status.BANNED, "monkey_patch (line 19): patches torch.cuda.Event.elapsed_time: the judge's own calls would run the replacement (+1 more)"),
    ("cheat_thread.py", SOFTMAX, Status.BANNED, "banned_import (line 7): imports importlib: a candidate may import torch, triton and a few standard modules"),
    ("cheat_lazy_tensor.py", SOFTMAX, Status.BANNED, "tensor_subclass (line 19): class Lazy derives from torch.Tensor: it can compute when read (+3 more)"),
    ("cheat_half_precision.py", SOFTMAX, Status.BANNED, "precision_downgrade (line 21): calls .half(): the reference computes in float32"),
    ("cheat_tf32_switch.py", SOFTMAX, Status.BANNED, "precision_downgrade (line 22): sets torch.backends.cuda.matmul.allow_tf32: the reference computes in float32"),
    ("cheat_side_stream.py", SOFTMAX, Status.BANNED, "side_stream (line 22): uses torch.cuda.stream: moves work off the current stream, where the judge's events cannot see it"),
    ("cheat_compile.py", SOFTMAX, Status.BANNED, "delegation (line 9): uses torch.compile: asks torch to generate the code instead of writing kernels"),
    ("cheat_l2_persist.py", SOFTMAX, Status.BANNED, "banned_import (line 3): imports ctypes: runs native code the judge cannot see (+5 more)"),
    ("identity_copy.py", "degenerate/2_ReLU.py", Status.MISMATCH, "correctness: signed:"),
    ("tiny_scale_ok.py", "1_TinyScale.py", Status.OK, "passed every check"),
    ("tiny_scale_zeros.py", "1_TinyScale.py", Status.MISMATCH, "correctness: trial_1: degenerate problem"),
]


# Findings after the first, which the verdict's reason only counts: the static_audit check lists them all.
ALSO_FOUND = {
    "cheat_inherits_model.py": ["reference_model (line 6): ModelNew inherits from problem.Model, not torch.nn.Module"],
    "cheat_timer_patch.py": ["monkey_patch (line 20): patches time.perf_counter"],
    "cheat_l2_persist.py": ["cuda_persistence (line 11): mentions 'accesspolicywindow'", "cuda_persistence (line 28): mentions 'cudastreamsetattribute'"],
}


@pytest.mark.parametrize("name, problem_file, status, reason", CASES, ids=[c[0] for c in CASES])
def test_fixture_gets_its_exact_verdict(cpu_judge: Judge, name, problem_file, status, reason):
    result = cpu_judge.evaluate(problem(problem_file), candidate(name))
    assert (result.status, result.reason[: len(reason)]) == (status, reason), result.log_tail
    audit = next(c for c in result.checks if c.name == "static_audit")
    for finding in ALSO_FOUND.get(name, ()):
        assert finding in audit.detail, audit.detail


def test_honest_verdict_shows_every_check_and_no_timing_on_cpu(cpu_judge: Judge):
    result = cpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    names = [c.name for c in result.checks]
    assert names[:3] == ["static_audit", "channel_integrity", "judge_integrity"] and "correctness" in names
    assert all(c.passed for c in result.checks if c.name not in ("timing_bracket", "side_stream", "physical_limit"))
    assert result.timing is None and result.speedups == {}
    assert any(f.name == "timing_skipped" for f in result.flags)
    # 5 trials + signed + scaled + outliers + 3 repeats + the audit call, each compared with the reference
    assert [t.name for t in result.trials] == [f"trial_{i}" for i in range(1, 6)] + ["signed", "scaled", "outliers", "repeat_1", "repeat_2", "repeat_3", "audit"]
    assert all(t.passed and t.max_abs_err < 1e-5 for t in result.trials)
    assert result.kernels_launched == {"softmax_kernel": 12}


def test_verdict_round_trips_through_json(cpu_judge: Judge):
    result = cpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert from_jsonable(EvalResult, to_jsonable(result)) == result


def test_degenerate_problem_is_flagged(cpu_judge: Judge):
    result = cpu_judge.evaluate(problem("1_TinyScale.py"), candidate("tiny_scale_ok.py"))
    assert any(f.name == "degenerate_problem" and "all zeros would pass" in f.message for f in result.flags)


def test_library_gemm_with_fused_triton_epilogue_passes(cpu_judge: Judge):
    result = cpu_judge.evaluate(problem("level2/1_Linear_GELU_Scale.py"), candidate("gemm_epilogue_triton.py"))
    assert result.status is Status.OK, result.reason
    delegation = next(c for c in result.checks if c.name == "torch_delegation")
    assert delegation.passed and delegation.detail.startswith("torch compute ops still used: ") and "mm" in delegation.detail


@pytest.mark.parametrize(
    "name, status, reason",
    [
        ("hang_first_call.py", Status.TIMEOUT, "compile phase (first_call) exceeded 6 s"),
        ("hang_later.py", Status.TIMEOUT, "run phase (correctness) exceeded 6 s"),
    ],
)
def test_hangs_are_killed(impatient_judge: Judge, name, status, reason):
    result = impatient_judge.evaluate(problem(SOFTMAX), candidate(name))
    assert (result.status, result.reason[: len(reason)]) == (status, reason)
    assert result.duration_s < 30


def no_static_findings(source, reference_dtypes=frozenset()):
    return ()


def test_output_cache_is_caught_by_the_outputs_too():
    with Judge(EvalOptions(device="cpu", correctness_trials=2, repeat_calls=0), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("cheat_cache_by_shape.py"))
    # the cached tensor is handed back again, in memory the first answer holds (and its values are trial_1's)
    assert (result.status, result.reason[:31]) == (Status.MISMATCH, "fresh_outputs: call trial_2 han"), result.reason
    assert next(c for c in result.checks if c.name == "correctness").detail.startswith("trial_2:")


@pytest.mark.parametrize(
    "name, reason",
    [
        ("cheat_timer_patch.py", "judge_integrity: replaced during the import and construction: time.perf_counter"),
        ("cheat_thread.py", "background_threads: threads still running after call(s) trial_1"),
        ("cheat_lazy_tensor.py", "output_types: outputs of type egg_candidate.Lazy"),
        ("cheat_tf32_switch.py", "judge_integrity: replaced during call trial_1: torch.backends.cuda.matmul.allow_tf32 (now True)"),
        ("cheat_seed_wrapper.py", "judge_integrity: replaced during the import and construction: torch.manual_seed"),
    ],
)
def test_run_time_probes_catch_what_the_static_audit_would(name, reason):
    """With the static audit switched off (a test double of our own Auditor), the worker's probes still catch these."""
    with Judge(EvalOptions(device="cpu", correctness_trials=1, repeat_calls=1), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate(name))
    assert (result.status, result.reason[: len(reason)]) == (Status.BANNED, reason)


def test_torch_importing_dynamo_under_a_candidate_is_not_tampering():
    """The probes import no torch._dynamo (seconds on a cold host); a candidate whose call imports it sees torch
    rewrap torch.manual_seed, and that alone is torch's doing, not a replaced function."""
    with Judge(EvalOptions(device="cpu", correctness_trials=1, repeat_calls=1), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("softmax_imports_dynamo.py"))
    assert (result.status, result.reason) == (Status.OK, "passed every check")


def test_the_probes_import_no_dynamo():
    """Entering our dispatch mode, warming up and snapshotting leave torch._dynamo unimported (a fresh process, as a
    worker is: the test process may have imported it already)."""
    code = (
        "import sys, torch\n"
        "from pipeline.judge.probes import NamespaceSnapshot, OpRecorder, warm_up\n"
        "warm_up(torch.device('cpu'))\n"
        "snapshot = NamespaceSnapshot()\n"
        "with OpRecorder() as rec:\n"
        "    torch.ones(3).exp().sum()\n"
        "print('torch._dynamo' in sys.modules, sorted(rec.ops))\n"
        "import torch._dynamo\n"
        "print(snapshot.changes())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines() == ["False ['exp', 'sum']", "[]"]


def test_candidate_sees_no_secrets_and_runs_in_a_temporary_folder(monkeypatch):
    for name in ("EGG_TEST_API_KEY", "EGG_TEST_TOKEN", "EGG_TEST_SECRET", "EGG_TEST_DB_PASSWORD"):
        monkeypatch.setenv(name, "do-not-leak")
    with Judge(EvalOptions(device="cpu", correctness_trials=1, repeat_calls=0), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("env_probe.py"))  # what it can see at run time
    assert result.status is Status.OK, result.reason


def test_secret_names_are_scrubbed_from_the_worker_environment(monkeypatch):
    from pipeline.judge.sandbox import clean_environment

    for name in ("OPENAI_API_KEY", "HF_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "GCP_CREDENTIALS", "EGG_GH_AUTH"):
        monkeypatch.setenv(name, "x")
    # a name that looks harmless is dropped too unless a worker needs it: the user's environment is not the job's
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:pw@db/prod")
    monkeypatch.setenv("EGG_HARMLESS", "kept")
    env = clean_environment("cpu")
    assert [k for k in env if any(w in k for w in ("KEY", "TOKEN", "PASSWORD", "SECRET", "CREDENTIAL", "AUTH"))] == []
    assert "DATABASE_URL" not in env
    assert env["EGG_HARMLESS"] == "kept" and env["TRITON_INTERPRET"] == "1"


@pytest.mark.parametrize("name, status", [("softmax_ok.py", Status.OK), ("cheat_phase_switch.py", Status.MISMATCH)])
def test_large_outputs_of_extra_calls_are_compared_on_a_subsample(name, status):
    """With a threshold below the softmax's 1024 elements, repeats and the audit call ship a strided subsample:
    honest outputs still pass, and a kernel that turns cheap after the trials is still caught on it."""
    with Judge(EvalOptions(device="cpu", subsample_above=64)) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate(name))
    assert result.status is status, result.reason
    if status is Status.MISMATCH:
        assert result.reason.startswith("correctness: repeat_1:")


def test_a_reference_that_fails_is_an_infra_error_and_the_waiting_candidate_is_ended(cpu_judge: Judge):
    """The candidate's worker starts while the reference runs; when the reference fails, it is killed, not left."""
    result = cpu_judge.evaluate(problem("2_BrokenReference.py"), candidate("softmax_ok.py"))
    assert result.status is Status.INFRA_ERROR
    assert result.reason.startswith("the reference problem failed to run: the reference raised RuntimeError: the reference itself is broken"), result.reason
    assert cpu_judge.pool._jobs == {}


def _scripted_runs(monkeypatch, *results):
    """Evaluation.run answers with these verdicts in turn (the side-stream check needs a GPU to fail for real)."""
    from pipeline.judge import judge as judge_module

    queue = list(results)
    calls = []

    def run(self):
        calls.append(self)
        return queue.pop(0)

    monkeypatch.setattr(judge_module.Evaluation, "run", run)
    return calls


def _verdict(status, reason, passed):
    from pipeline.types import Check, Flag

    checks = (Check("correctness", True, "max error 0"), Check("side_stream", passed, "event time 0.004 ms, time to full-device sync 0.07 ms (allowed 0.054 ms)"))
    return EvalResult(status, reason, problem(SOFTMAX), candidate("softmax_ok.py"), "cuda", checks=checks, flags=(Flag("x", "kept"),))


SIDE_BAN = "side_stream: work ran outside the timed stream: event time 0.004 ms"


def test_a_side_stream_ban_is_timed_a_second_time_and_a_pass_then_decides(cpu_judge, monkeypatch):
    calls = _scripted_runs(monkeypatch, _verdict(Status.BANNED, SIDE_BAN, False), _verdict(Status.OK, "passed every check", True))
    result = cpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert len(calls) == 2
    assert result.status is Status.OK
    retimed = [f for f in result.flags if f.name == "side_stream_retimed"]
    assert len(retimed) == 1 and "0.07 ms" in retimed[0].message
    assert [f.name for f in result.flags][0] == "x"  # the second run's own flags are kept


def test_a_side_stream_ban_twice_is_a_ban_that_names_both_timings(cpu_judge, monkeypatch):
    calls = _scripted_runs(monkeypatch, _verdict(Status.BANNED, SIDE_BAN, False), _verdict(Status.BANNED, SIDE_BAN, False))
    result = cpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert len(calls) == 2
    assert result.status is Status.BANNED
    assert result.reason.startswith(SIDE_BAN) and "the second of two timings" in result.reason
    assert not any(f.name == "side_stream_retimed" for f in result.flags)


@pytest.mark.parametrize("status,reason,passed", [
    (Status.BANNED, "triton_launched: no Triton kernel of the candidate launched", False),  # another check decided
    (Status.BANNED, "side_stream (line 4): moves work off the current stream", None),  # the static audit's rule
    (Status.OK, "passed every check", True),
])
def test_no_second_timing_for_anything_else(cpu_judge, monkeypatch, status, reason, passed):
    calls = _scripted_runs(monkeypatch, _verdict(status, reason, passed))
    result = cpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert len(calls) == 1 and result.status is status and result.reason == reason
