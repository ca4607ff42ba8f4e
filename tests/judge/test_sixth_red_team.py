"""The sixth red team (session 16), a helper that had seen none of our fixtures, attacking the landed judge and
`egg bench`: of its candidates two passed `egg check` (`ok`) and are fixtures here (tests/fixtures/redteam6), each
caught by the audit and, with the audit off, by what the run-time checks see where they can:
- a softmax in pure Python on a tensor's bytes read through `untyped_storage()` (no dispatch mode or host probe saw
  it): the audit bans storage access and the host probe counts it (Triton's own interpreter excepted);
- `dict(a=torch)["a"].sys.modules["builtins"].exec(...)`: torch reached through an expression the alias rules could
  not trace, and from there hidden code that runs the reference `Model` with the original `_DisableTorchDispatch`.
  The audit now refuses a module or dangerous builtin read from any untraced value; with the audit off it passes,
  the audit being the line once arbitrary code runs in the candidate's process (its in-process facts are its own).
- a probe that counts its own evaluations in its persistent compile cache (the retime's second run can be known;
  it gains nothing, since that run must pass every check by itself), and one of ours after the team: the same
  softmax from `float(v)` per element, caught at run time by the host probe.
"""

from __future__ import annotations

import re

import pytest

from pipeline.judge.audit import audit_file
from pipeline.judge.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

from .conftest import ROOT, TINY

REDTEAM6 = ROOT / "tests" / "fixtures" / "redteam6"
SOFTMAX = TINY / "level1" / "23_Softmax.py"
# (the share depends on the route: a storage read byte by byte counts its bytes and each value torch reads for it)
HOST = re.compile(r"torch_delegation: \d+% of the problem's bytes go to the host as numpy or Python data in call ")

# (fixture, the audit's first finding, the status and reason start with the audit off)
CASES = [
    ("r6_storage_bytes.py", "delegation", Status.BANNED, HOST),
    ("r6_untraced_sys_exec.py", "introspection", Status.OK, "passed every check"),  # the audit is the line
    ("r6_run_counter.py", "introspection", Status.COMPILE_ERROR, "ModelNew(*get_init_inputs()) failed: ValueError: EVALUATION NUMBER"),
    ("r6_float_per_element.py", None, Status.BANNED, HOST),
]


@pytest.fixture(scope="module")
def unaudited_judge():
    with Judge(EvalOptions(device="cpu", compile_timeout_s=60, run_timeout_s=60), auditor=lambda *a, **k: ()) as judge:
        yield judge


@pytest.mark.parametrize("name,finding,status,reason", CASES, ids=[c[0] for c in CASES])
def test_the_audit_finds_it(name, finding, status, reason):
    findings = audit_file(REDTEAM6 / name, reference_dtypes=frozenset({"float32"}))
    assert (findings[0].rule if findings else None) == finding, [(f.rule, f.message) for f in findings]


@pytest.mark.parametrize("name,finding,status,reason", CASES, ids=[c[0] for c in CASES])
def test_with_the_audit_off_the_run_time_checks_say(unaudited_judge, name, finding, status, reason):
    result = unaudited_judge.evaluate(load_problem(SOFTMAX), load_candidate(REDTEAM6 / name))
    said = reason.match(result.reason) if isinstance(reason, re.Pattern) else result.reason.startswith(reason)
    assert result.status is status and said, (result.status, result.reason)


def test_both_candidates_that_passed_are_banned_by_egg_check(cpu_judge):
    for name in ("r6_storage_bytes.py", "r6_untraced_sys_exec.py"):
        result = cpu_judge.evaluate(load_problem(SOFTMAX), load_candidate(REDTEAM6 / name))
        assert result.status is Status.BANNED, (name, result.reason)


@pytest.mark.parametrize("source", [
    "import torch\nx = (lambda: torch)().sys\n",
    "import torch\nx = next(iter([torch])).sys.modules\n",
    "import torch\nx = (torch if True else None).builtins\n",
    "import torch\nb = dict(t=torch)['t']\nb.os.system('id')\n",
])
def test_a_module_read_from_an_untraced_value_is_a_finding(tmp_path, source):
    path = tmp_path / "c.py"
    path.write_text(source)
    assert any(f.rule == "introspection" and "cannot trace" in f.message for f in audit_file(path, reference_dtypes=frozenset()))


# Its second pass, on the fixed audit: 8 more `ok` (r6b_*). Each is now a finding of the audit, which is the line
# for them: once code runs that the audit did not see, the in-process facts are the candidate's own.
SECOND_PASS = [
    ("r6b_01_tensorbase_tolist.py", "introspection"),  # torch.Tensor.__bases__[0].tolist: TensorBase's, unwrapped
    ("r6b_02_globals_builtins_exec.py", "introspection"),  # (lambda: 0).__globals__["__builtins__"]["ex" + "ec"]
    ("r6b_03_dict_sys_route.py", "introspection"),  # dict(a=torch)["a"].__dict__["sys"]
    ("r6b_04_stdlib_private_aliases.py", "dynamic_code"),  # enum.bltns.exec, collections._sys._getframe
    ("r6b_05_computed_key_vars.py", "introspection"),  # vars(torch)["s" + "ys"]
    ("r6b_06_super_item.py", "delegation"),  # super(torch.Tensor, e).item(), past the host probe
    ("r6b_07_generic_reference_hidden.py", "dynamic_code"),  # the reference Model run under the real dispatch switch
    ("r6b_10_tensorbase_storage.py", "introspection"),  # TensorBase.untyped_storage
]


@pytest.mark.parametrize("name,finding", SECOND_PASS, ids=[c[0] for c in SECOND_PASS])
def test_the_second_pass_is_found_by_the_audit(name, finding):
    findings = audit_file(REDTEAM6 / name, reference_dtypes=frozenset({"float32"}))
    assert findings and findings[0].rule == finding, [(f.rule, f.message) for f in findings]


def test_the_generic_one_is_banned_by_egg_check_on_another_problem(cpu_judge):
    result = cpu_judge.evaluate(load_problem(TINY / "level1" / "15_Swish.py"), load_candidate(REDTEAM6 / "r6b_07_generic_reference_hidden.py"))
    assert result.status is Status.BANNED and result.reason.startswith("dynamic_code"), result.reason


# Its third pass, on the audit as fixed after the second: 6 more `ok` (r6c_*), now each a finding but one (apply_
# through type(w), caught at run time); the two that compute on the host are caught with the audit off too.
THIRD_PASS = [
    ("r6c_a01_name_spoof_storage.py", "introspection"),  # `__name__ = "torch.candidate"` to pass as torch's own code
    ("r6c_a03_apply_alias.py", None),  # type(w).apply_: every element through a Python callback (run time: the host probe)
    ("r6c_a04_torch_threading.py", "banned_import"),  # torch.threading.Thread: torch ops where no recorder watches
    ("r6c_a05_inspect_frames_reference_model.py", "banned_import"),  # torch.inspect.stack and getmembers
    ("r6c_a06_frames_exec_recorder_swap.py", "banned_import"),  # the judge's record of the call blanked through frames
    ("r6c_a07_graphs_torch_selfref.py", "delegation"),  # torch.accelerator.graphs.torch is torch
    ("r6c_a08_thread_gemm.py", "banned_import"),
]


@pytest.mark.parametrize("name,finding", THIRD_PASS, ids=[c[0] for c in THIRD_PASS])
def test_the_third_pass_is_found_by_the_audit(name, finding):
    findings = audit_file(REDTEAM6 / name, reference_dtypes=frozenset({"float32"}))
    assert (findings[0].rule if findings else None) == finding, [(f.rule, f.message) for f in findings]


@pytest.mark.parametrize("name", ["r6c_a01_name_spoof_storage.py", "r6c_a03_apply_alias.py"])
def test_host_work_of_the_third_pass_is_caught_with_the_audit_off(unaudited_judge, name):
    result = unaudited_judge.evaluate(load_problem(SOFTMAX), load_candidate(REDTEAM6 / name))
    assert result.status is Status.BANNED and result.reason.startswith("torch_delegation:") and "go to the host" in result.reason, result.reason
