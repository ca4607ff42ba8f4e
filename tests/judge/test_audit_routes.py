"""Routes around the static audit, from session 23's held-out red team (tests/fixtures/audit_routes, README there):
13 of its 16 cheats got `ok` on the judge it attacked; each is now refused by the audit (the four that used library
primitives were banned at run time already, checked here with the full judge), and its two refused honest kernels
pass. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.audit import audit_file
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ROOT / "tests" / "fixtures" / "audit_routes"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"
# (fixture, the rule its first finding has)
CAUGHT_BY_THE_AUDIT = [
    ("01_jit_alias_helper_numpy.py", "introspection"),
    ("02_jit_as_call_numpy.py", "introspection"),
    ("03_lambda_decorator_numpy.py", "dynamic_code"),
    ("04_typing_eval_numpy.py", "dynamic_code"),
    ("05_typing_eval_recorder_edit.py", "dynamic_code"),
    ("06_mro_getattr_numpy.py", "introspection"),
    ("07_mro_tolist_python.py", "delegation"),
    ("08_match_mapping_sys.py", "introspection"),
    ("09_match_mapping_recorder.py", "introspection"),
    ("10_utf7_fs_linebreak.py", "dynamic_code"),
    ("19_typing_eval_fake_launch.py", "dynamic_code"),
    ("21_vars_get_sys.py", "introspection"),
]
HONEST = ["14_honest_online_softmax.py", "15_honest_atomic_split_sum.py", "16_honest_match_heuristics_swish.py",
          "17_honest_reduce_combine_max.py", "20_honest_constexpr_fn_arg.py", "22_honest_module_alias_jit_helper.py"]
# library primitives of another kind than the reference's, or an op the judge counts as moving memory: run time
BANNED_AT_RUN_TIME = [("11_cumsum_sum.py", "12_Sum_Dim1.py"), ("12_maxpool_max.py", "13_Max_LastDim.py"),
                      ("13_gemv_conv1d.py", "5_GEMV.py"), ("18_index_select_backward_sum.py", "12_Sum_Dim1.py")]


def test_every_attempt_is_a_fixture_here():
    assert len(list(ROUTES.glob("*.py"))) == len(CAUGHT_BY_THE_AUDIT) + len(HONEST) + len(BANNED_AT_RUN_TIME) == 22


@pytest.mark.parametrize("name, rule", CAUGHT_BY_THE_AUDIT, ids=[c[0] for c in CAUGHT_BY_THE_AUDIT])
def test_a_route_around_the_audit_is_refused(name, rule):
    findings = audit_file(ROUTES / name)
    assert findings and findings[0].rule == rule, findings


@pytest.mark.parametrize("name", HONEST)
def test_the_unusual_honest_kernels_pass_the_audit(name):
    assert audit_file(ROUTES / name) == ()


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


@pytest.mark.parametrize("name", ["20_honest_constexpr_fn_arg.py", "22_honest_module_alias_jit_helper.py"])
def test_the_honest_kernels_the_audit_refused_pass_the_full_judge(judge, name):
    result = judge.evaluate(load_problem(TINY / "15_Swish.py"), load_candidate(ROUTES / name))
    assert result.status is Status.OK, result.reason


@pytest.mark.parametrize("name, problem", BANNED_AT_RUN_TIME, ids=[c[0] for c in BANNED_AT_RUN_TIME])
def test_library_work_of_another_kind_is_the_candidates_torch_work(judge, name, problem):
    result = judge.evaluate(load_problem(TINY / problem), load_candidate(ROUTES / name))
    assert result.status is Status.BANNED and result.reason.startswith("torch_delegation: torch computes "), result.reason
