"""The red team's fixtures (tests/fixtures/redteam): each cheat is caught twice over, by the static audit where its
source shows it and by the run-time checks with the audit switched off, and each unusual honest kernel passes.

The audit-off runs are the point: they show what the parent's own facts catch when a candidate's source gets past
every rule (fresh inputs it cannot know, outputs it cannot point elsewhere, its work watched on every call, the
protocol enforced). A few fixtures only reach for something (a module, a frame) and do no harm once there; for
those the audit is the line, and the run ends `ok`, which the table says.
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from pipeline.judge.audit import audit_file
from pipeline.judge.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

from .conftest import ROOT, TINY

REDTEAM = ROOT / "tests" / "fixtures" / "redteam"
SOFTMAX, SWISH, GELU = "level1/23_Softmax.py", "level1/15_Swish.py", "level1/16_GELU_Scale_Bias.py"
FP32 = frozenset({"float32"})

# (fixture, problem, the audit's first finding, the status and reason with the audit off)
CHEATS = [
    ("rt_manifest_paths.py", SOFTMAX, "banned_import", Status.BANNED, "triton_launched: no Triton kernel of the candidate launched"),
    ("rt_sysmodules_probes.py", SOFTMAX, "banned_import", Status.COMPILE_ERROR, "importing the candidate failed: KeyError: 'pipeline.judge.probes'"),
    ("rt_traceback_counter.py", SOFTMAX, "fallback", Status.BANNED, "judge_integrity: replaced during call trial_1: the judge's launch counter"),
    ("rt_traceback_records.py", SOFTMAX, "fallback", Status.BANNED, "triton_launched: no Triton kernel of the candidate launched in call(s) trial_1"),
    ("rt_gc_counter.py", SOFTMAX, "banned_import", Status.BANNED, "judge_integrity: replaced during call trial_1: the judge's launch counter"),
    ("rt_gc_model.py", SOFTMAX, "banned_import", Status.BANNED, "torch_delegation: every compute op of the reference still runs in torch (_softmax)"),
    ("rt_gelu_decomposed.py", GELU, None, Status.BANNED, "torch_delegation: torch computes"),
    ("rt_numpy_softmax.py", SOFTMAX, "banned_import", Status.BANNED, "torch_delegation: 50% of the problem's bytes go to the host"),
    ("rt_array_protocol.py", SOFTMAX, "delegation", Status.BANNED, "torch_delegation: 100% of the problem's bytes go to the host"),
    ("rt_tolist_python.py", SOFTMAX, "delegation", Status.BANNED, "torch_delegation: 50% of the problem's bytes go to the host"),
    ("rt_unwatched_torch.py", SOFTMAX, "introspection", Status.OK, "passed every check"),  # watched on every call: only its kernel ran
    ("rt_private_dispatch.py", SOFTMAX, "introspection", Status.BANNED, "judge_integrity: replaced during call trial_1: torch._C._DisableTorchDispatch"),
    ("rt_memo_contents.py", SOFTMAX, None, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched in call(s) repeat_1"),
    ("rt_rebuild_inputs.py", SOFTMAX, None, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched in call(s) trial_1"),
    ("rt_third_of_output.py", SOFTMAX, None, Status.MISMATCH, "correctness: repeat_1:"),
    ("rt_approx_fallback.py", SWISH, None, Status.BANNED, "triton_launched: no Triton kernel of the candidate launched in call(s) signed, scaled"),
    ("rt_approx_only.py", SWISH, None, Status.MISMATCH, "correctness: signed:"),
    ("rt_del_finalizer.py", SOFTMAX, "introspection", Status.BANNED, "judge_integrity: replaced during call trial_1: torch.backends.cuda.matmul.allow_tf32"),
    ("rt_import_pipeline.py", SOFTMAX, "banned_import", Status.COMPILE_ERROR, "importing the candidate failed: ImportError: pipeline is egg's judge"),
    ("rt_forged_region.py", SOFTMAX, "banned_import", Status.BANNED, "channel_integrity: an unexpected message of type 'region' on the channel"),
    ("rt_forged_outputs.py", SOFTMAX, "banned_import", Status.BANNED, "channel_integrity: outputs of a call 'trial_9' the judge never made"),
    ("rt_forged_wait.py", SOFTMAX, "banned_import", Status.BANNED, "channel_integrity: a wait for go, which the judge never sends this job"),
    ("rt_flood.py", SOFTMAX, "banned_import", Status.BANNED, "channel_integrity: a clock mark 'trials_start' the judge did not expect"),
    ("rt_fifo_files.py", SOFTMAX, "dynamic_code", Status.RUNTIME_ERROR, "the process exited with code 70 during phase done"),
    ("rt_forged_result.py", SOFTMAX, "banned_import", Status.BANNED, "channel_integrity: the job ended at phase first_call without finishing"),
    # the audit is the line: reaching the thing does no harm by itself once the judge's modules are out of reach
    ("rt_torch_os_fork.py", SOFTMAX, "dynamic_code", Status.OK, "passed every check"),
    ("rt_getattr_computed.py", SOFTMAX, "dynamic_code", Status.OK, "passed every check"),
    ("rt_frames_via_generator.py", SOFTMAX, "dynamic_code", Status.OK, "passed every check"),
    ("rt_vars_of_module.py", SOFTMAX, "banned_import", Status.OK, "passed every check"),
    ("rt_string_formatter.py", SOFTMAX, "introspection", Status.OK, "passed every check"),
    ("rt_attrgetter.py", SOFTMAX, "introspection", Status.OK, "passed every check"),
    ("rt_getattr_as_value.py", SOFTMAX, "introspection", Status.OK, "passed every check"),
    ("rt_loader_get_data.py", SOFTMAX, "introspection", Status.OK, "passed every check"),
    ("rt_subclasses_walk.py", SOFTMAX, "introspection", Status.OK, "passed every check"),
    ("rt_pty_spawn.py", SOFTMAX, "banned_import", Status.COMPILE_ERROR, "ModelNew(*get_init_inputs()) failed: OSError: out of pty devices"),  # no pseudo-terminal in the sandbox
    ("rt_posixsubprocess.py", SOFTMAX, "banned_import", Status.OK, "passed every check"),
    ("rt_torch_library.py", SOFTMAX, "monkey_patch", Status.OK, "passed every check"),
]
HONEST = [
    ("honest_autotuned_softmax.py", SOFTMAX),
    ("honest_cached_config.py", SOFTMAX),
    ("honest_two_pass_softmax.py", SOFTMAX),
    ("honest_library_conv_epilogue.py", "level2/2_Conv2d_ReLU_BiasAdd.py"),
    ("honest_sign_aware.py", SWISH),
    ("honest_reused_workspace.py", SOFTMAX),
]


def no_static_findings(source, reference_dtypes=frozenset()):
    return ()


@pytest.fixture(scope="module")
def unaudited():
    """The audit switched off (a test double of our own Auditor), a small subsample so extra calls use it."""
    options = EvalOptions(device="cpu", compile_timeout_s=30, run_timeout_s=30, subsample_above=64)
    with Judge(options, auditor=no_static_findings) as judge:
        yield judge


@pytest.fixture(scope="module")
def audited():
    with Judge(EvalOptions(device="cpu", compile_timeout_s=60, run_timeout_s=60)) as judge:
        yield judge


def test_every_fixture_of_the_red_team_is_in_the_table():
    listed = {c[0] for c in CHEATS} | {h[0] for h in HONEST} | {"reused_output_buffer.py"}
    assert listed == {p.name for p in REDTEAM.glob("*.py")}
    assert len(CHEATS) >= 30 and len(HONEST) >= 6


@pytest.mark.parametrize("name, problem_file, rule, status, reason", CHEATS, ids=[c[0] for c in CHEATS])
def test_the_audit_names_what_the_source_shows(name, problem_file, rule, status, reason):
    findings = audit_file(REDTEAM / name, reference_dtypes=FP32)
    assert (findings[0].rule if findings else None) == rule, findings


@pytest.mark.parametrize("name, problem_file, rule, status, reason", CHEATS, ids=[c[0] for c in CHEATS])
def test_with_the_audit_off_the_run_time_checks_give_the_verdict(unaudited, name, problem_file, rule, status, reason):
    result = unaudited.evaluate(load_problem(TINY / problem_file), load_candidate(REDTEAM / name))
    # the expected status is never a timeout: no attack holds the judge up (a wall-clock bound here depended on load)
    assert (result.status, result.reason[: len(reason)]) == (status, reason), result.reason


@pytest.mark.parametrize("name, problem_file", HONEST, ids=[h[0] for h in HONEST])
def test_unusual_honest_kernels_pass_the_full_judge(audited, name, problem_file):
    result = audited.evaluate(load_problem(TINY / problem_file), load_candidate(REDTEAM / name))
    assert (result.status, result.reason) == (Status.OK, "passed every check"), (result.reason, result.log_tail[-2000:])


def test_one_output_buffer_reused_for_every_answer_is_no_drop_in(audited):
    """Once judged honest (each call's outputs are copied out when it returns); since session 22 a drop-in module's
    answers are memory of their own: a caller keeping two answers (`y1 = m(x1); y2 = m(x2)`) would read y2 twice."""
    result = audited.evaluate(load_problem(TINY / SOFTMAX), load_candidate(REDTEAM / "reused_output_buffer.py"))
    assert result.status is Status.MISMATCH and result.reason.startswith("fresh_outputs: call trial_2 handed back memory"), result.reason


def test_a_library_primitive_is_the_whole_job_on_a_problem_that_is_nothing_else(audited, tmp_path):
    """Keeping cuDNN's convolution is fine beside other work (above); on a problem that is only a convolution, a
    Triton copy of torch's convolution is delegation."""
    kernel = (REDTEAM / "honest_library_conv_epilogue.py").read_text()
    source = kernel.replace("tl.maximum(y, 0.0) + b", "y + 0.0 * b")
    path = tmp_path / "conv_only.py"
    path.write_text(source)
    conv_only = tmp_path / "22_Conv2d.py"
    conv_only.write_text((TINY / "level2/2_Conv2d_ReLU_BiasAdd.py").read_text().replace(
        "        x = torch.relu(x)\n        return x + self.bias", "        return x"))
    result = audited.evaluate(load_problem(conv_only), load_candidate(path))
    assert (result.status, result.reason[:60]) == (Status.BANNED, "torch_delegation: every compute op of the reference still ru")


def test_a_library_primitive_the_reference_never_calls_is_the_candidates_torch_work(audited):
    """A row sum written as a GEMM against ones (cuBLAS does the job, Triton copies the answer): `ok` while any
    library work passed beside a reference's other work; now it counts as torch computing the sum."""
    result = audited.evaluate(load_problem(TINY / "level1/12_Sum_Dim1.py"),
                              load_candidate(ROOT / "tests" / "fixtures" / "library_work" / "row_sum_as_gemm.py"))
    assert result.status is Status.BANNED and result.reason.startswith("torch_delegation: torch computes 1"), result.reason


def work(ops: dict[str, int], library_bytes=0, library_flops=0, other_bytes=0, to_host_bytes=0) -> dict:
    """A call's work as the worker records it; the library bytes and FLOPs are the kind of its one library op."""
    from pipeline.judge.probes import LIBRARY_OPS, library_family

    kinds = {library_family(op) for op in ops if op in LIBRARY_OPS}
    assert len(kinds) <= 1
    return {"ops": ops, "library_bytes": library_bytes, "library_flops": library_flops, "other_bytes": other_bytes,
            "other_flops": 0, "to_host_bytes": to_host_bytes, "calls": 0,
            "library": {kind: [library_bytes, library_flops] for kind in kinds}}


def delegation(reference_work: dict, reference_ops: list[str], call_work: dict):
    from pipeline.judge.verdict import WorkerReport, delegation_check

    call = {"name": "trial_1", "kind": "tensor", "types": [], "tensors": [], "launches": 1, "own_launches": 1,
            "mutated_inputs": [], "threads_after": 0, "work": call_work}
    reference = {"work": reference_work, "ops": reference_ops, "min_bytes": 8 << 20}
    return delegation_check(reference, WorkerReport.model_validate({"calls": [call]}))


GEMM_GELU = work({"mm": 1, "gelu": 1}, library_bytes=6 << 20, library_flops=2 * 1024**3, other_bytes=8 << 20)


def test_delegation_by_work_allows_a_library_gemm_beside_its_fused_epilogue():
    check = delegation(GEMM_GELU, ["gelu", "mm"], work({"mm": 1}, library_bytes=6 << 20, library_flops=2 * 1024**3))
    assert check.passed and check.detail.endswith("library kept: mm"), check.detail


def test_delegation_by_work_bans_the_epilogue_in_torch_however_it_is_spelled():
    spelled = work({"mm": 1, "erf": 1, "mul": 3, "add": 1}, library_bytes=6 << 20, library_flops=2 * 1024**3, other_bytes=40 << 20)
    check = delegation(GEMM_GELU, ["gelu", "mm"], spelled)
    assert check.passed is False and check.detail.startswith("torch computes 500% of the reference's non-library work"), check.detail


def test_delegation_by_work_bans_a_library_call_that_is_the_whole_problem():
    linear_only = work({"addmm": 1}, library_bytes=6 << 20, library_flops=1024**3)  # nn.Linear: cuBLAS is the whole job
    check = delegation(linear_only, ["addmm"], work({"mm": 1}, library_bytes=6 << 20, library_flops=1024**3))
    assert check.passed is False and check.detail.startswith("library primitives (mm) do 100% of the reference's work"), check.detail
    conv_only = work({"convolution": 1}, library_bytes=6 << 20, library_flops=1024**3)  # and as another kind of primitive
    check = delegation(conv_only, ["convolution"], work({"mm": 1}, library_bytes=6 << 20, library_flops=1024**3))
    assert check.passed is False and check.detail.startswith("torch computes 100% of the reference's work outside Triton kernels"), check.detail


def test_delegation_by_work_counts_a_kind_of_library_work_the_reference_never_calls():
    """A row sum as a GEMM against ones, a softmax's denominator as logcumsumexp: library primitives, but not the
    reference's; their work is the candidate's torch compute (the third held-out red team's fourth class)."""
    row_sum = work({"sum": 1}, other_bytes=8 << 20)
    as_gemm = work({"mm": 1}, library_bytes=8 << 20, library_flops=2 * (1 << 21))
    check = delegation(row_sum, ["sum"], as_gemm)
    assert check.passed is False and check.detail.startswith("torch computes ") and "(mm)" in check.detail, check.detail
    softmax = work({"_softmax": 1}, other_bytes=8 << 20)
    check = delegation(softmax, ["_softmax"], work({"logcumsumexp": 1, "exp": 1}, library_bytes=8 << 20, other_bytes=64 << 10))
    assert check.passed is False and "logcumsumexp" in check.detail, check.detail
    scan = work({"cumsum": 1, "mul": 1}, library_bytes=8 << 20, other_bytes=8 << 20)  # the reference's own kind: kept
    assert delegation(scan, ["cumsum", "mul"], work({"cumsum": 1}, library_bytes=8 << 20)).passed


def test_delegation_by_work_allows_no_more_than_the_reference_gives_a_kind():
    thrice = work({"mm": 3}, library_bytes=18 << 20, library_flops=6 * 1024**3)  # the GEMM, and two more on the side
    check = delegation(GEMM_GELU, ["gelu", "mm"], thrice)
    assert check.passed is False and check.detail.startswith("torch computes "), check.detail
    padded = work({"mm": 1}, library_bytes=7 << 20, library_flops=2 * 1024**3 + (1 << 28))  # a padded layout: a little more
    assert delegation(GEMM_GELU, ["gelu", "mm"], padded).passed


def test_delegation_by_work_forgives_a_negligible_torch_op():
    check = delegation(GEMM_GELU, ["gelu", "mm"], work({"mm": 1, "sum": 1}, library_bytes=6 << 20, library_flops=2 * 1024**3, other_bytes=64 << 10))
    assert check.passed, check.detail


# The second red team: a helper that had seen none of the fixtures above wrote these against the judge as it
# stood (17 attempts, 14 of which got through: tests/fixtures/redteam2, each file's header says how). Each is now
# caught by the full judge, and with the audit off by the run-time checks (the one exception is said below).
REDTEAM2 = ROOT / "tests" / "fixtures" / "redteam2"
# (fixture, problem, the full judge's status and reason, the status and reason with the audit off)
SECOND = [
    ("a01_python_item_softmax.py", SOFTMAX, (Status.BANNED, "torch_delegation: 50% of the problem's bytes go to the host"),
     (Status.BANNED, "torch_delegation: 50% of the problem's bytes go to the host")),
    ("a02_shell_subprocess_softmax.py", SOFTMAX, (Status.BANNED, "banned_import (line 9): uses torch.utils"),
     (Status.BANNED, "background_threads: call(s) trial_1")),
    # caught by the outlier values: on the problem's shape in nearly every check; in about 1 of 140 no outlier of the
    # outliers trial passes exp's range (88.7), and a set of another shape with outlier values catches it instead
    ("a03_softmax_no_max_shift.py", SOFTMAX, (Status.MISMATCH, "non-finite mismatch"), (Status.MISMATCH, "non-finite mismatch")),
    ("a04_swish_range_limited.py", SWISH, (Status.MISMATCH, "correctness: outliers:"), (Status.MISMATCH, "correctness: outliers:")),
    ("a05_exclude_python_key.py", SOFTMAX, (Status.BANNED, "dynamic_code (line 13): calls getattr with a name computed at run time"),
     (Status.BANNED, "judge_integrity: replaced during call trial_1: torch._C._dispatch_tls_set_dispatch_key_excluded")),
    ("a06_frames_wipe_work.py", SOFTMAX, (Status.BANNED, "banned_import (line 6): imports logging"),
     (Status.BANNED, "judge_integrity: replaced during call trial_1: the judge's record of the call's torch work")),
    ("a07_forge_ok_failure.py", SOFTMAX, (Status.BANNED, "banned_import (line 5): imports logging"),
     (Status.BANNED, "channel_integrity: the worker's report ends in a status it may not give, 'ok'")),
    ("a08_closerange_infra_error.py", SOFTMAX, (Status.BANNED, "dynamic_code (line 13): uses os.closerange"),
     (Status.RUNTIME_ERROR, "the judge closed the channel")),  # counted against the candidate, not the judge
    ("a09_class_property_oom.py", SOFTMAX, (Status.BANNED, "introspection (line 14): binds __class__ in class Result"),
     (Status.RUNTIME_ERROR, "the result of call trial_1 could not be read")),
    ("a10_tmpfs_memory_bypass.py", SOFTMAX, (Status.BANNED, "banned_import (line 10): uses torch.utils"),
     (Status.OK, "passed every check")),  # an honest kernel; its 2 GB in /tmp now stop at the private /tmp's 1 GB
    ("a11_initial_environ_leak.py", SOFTMAX, (Status.BANNED, "banned_import (line 10): uses torch.utils"),
     (Status.RUNTIME_ERROR, "call trial_1 raised ValueError: LEAKED ENVIRONMENT")),  # and no secret in it (below)
    ("a12_daemon_outlive.py", SOFTMAX, (Status.BANNED, "banned_import (line 8): uses torch.utils"),
     (Status.BANNED, "background_threads: processes still running after call(s) trial_1")),
    ("a13_realtime_signal_crash.py", SOFTMAX, (Status.BANNED, "banned_import (line 8): uses torch.utils"),
     (Status.RUNTIME_ERROR, "the process died from signal 40")),
    ("a14_reference_model_reuse.py", "level3/2_TransformerBlock.py", (Status.BANNED, "banned_import (line 9): imports importlib"),
     (Status.BANNED, "judge_integrity: replaced during call trial_1: torch._C._dispatch_tls_set_dispatch_key_excluded")),
    ("a15_forged_call_records.py", SOFTMAX, (Status.BANNED, "banned_import (line 8): imports logging"),
     (Status.BANNED, "channel_integrity: a second record of call 'trial_1'")),
    ("c16_patch_worker_globals.py", SOFTMAX, (Status.BANNED, "banned_import (line 3): imports logging"),
     (Status.BANNED, "judge_integrity: replaced during call trial_1: pipeline.judge.worker.same_tensor")),
    ("c17_lazy_subclass_via_pick.py", SOFTMAX, (Status.BANNED, "dynamic_code (line 10): calls getattr with a name computed"),
     (Status.BANNED, "output_types: outputs of type egg_candidate.Lazy")),
]


def test_every_attempt_of_the_second_red_team_is_in_the_table():
    assert {s[0] for s in SECOND} == {p.name for p in REDTEAM2.glob("*.py")}


@pytest.mark.parametrize("name, problem_file, full, off", SECOND, ids=[s[0] for s in SECOND])
def test_the_second_red_teams_attempts_are_caught(audited, unaudited, name, problem_file, full, off):
    for judge, (status, reason) in ((audited, full), (unaudited, off)):
        result = judge.evaluate(load_problem(TINY / problem_file), load_candidate(REDTEAM2 / name))
        if reason == "non-finite mismatch":
            assert result.status is status and re.match(r"(correctness: outliers|other_shapes: wrong on inputs of another shape, "
                                                        r"[^:]*outlier values[^:]*): non-finite mismatch", result.reason), result.reason
            continue
        assert (result.status, result.reason[: len(reason)]) == (status, reason), result.reason


# The third team (session 11, a helper that had not seen these fixtures) attacked what the worker sets aside as
# Triton's compiles; its attempts that pass for source a person could write, and the rule that now catches each.
REDTEAM3 = ROOT / "tests" / "fixtures" / "redteam3"
THIRD = [
    ("build_wrapper.py", "banned_import", "uses triton.runtime.build"),
    ("env_only.py", "dynamic_code", "sets the environment variable COMPILER_PATH"),
    ("subscript_subprocess.py", "banned_import", "uses triton.runtime.build"),
    ("subscript_modules.py", "banned_import", "uses triton.runtime.build"),
]


def test_every_attempt_of_the_third_red_team_is_in_the_table():
    assert {t[0] for t in THIRD} == {p.name for p in REDTEAM3.glob("*.py")}


@pytest.mark.parametrize("name, rule, message", THIRD, ids=[t[0] for t in THIRD])
def test_the_third_red_teams_attempts_are_caught_by_the_audit(name, rule, message):
    findings = audit_file(REDTEAM3 / name, reference_dtypes=FP32)
    assert findings and (findings[0].rule, findings[0].message[: len(message)]) == (rule, message), findings


def test_a_module_reached_through_a_literal_container_is_resolved():
    findings = audit_file(REDTEAM3 / "subscript_modules.py", reference_dtypes=FP32)
    assert {f.line for f in findings} >= {8, 9, 10}, findings


def test_a_jobs_environment_holds_none_of_the_users_secrets(monkeypatch):
    """The attempt that read its worker's start-up environment finds only names a worker needs: not a key, not a
    database address, not a GH_AUTH (egg's processes start from a whitelist, not a blacklist)."""
    for name, value in (("GH_AUTH", "gh-auth-redteam"), ("DATABASE_URL", "postgres://admin:pw-redteam@db/prod"), ("OPENAI_API_KEY", "sk-redteam")):
        monkeypatch.setenv(name, value)
    with Judge(EvalOptions(device="cpu", correctness_trials=1, repeat_calls=0), auditor=no_static_findings) as judge:
        result = judge.evaluate(load_problem(TINY / SOFTMAX), load_candidate(REDTEAM2 / "a11_initial_environ_leak.py"))
    assert result.reason.startswith("call trial_1 raised ValueError: LEAKED ENVIRONMENT"), result.reason
    assert "redteam" not in result.reason and "sk-" not in result.reason, result.reason
