"""Issue 41, audit by allowlist (session 26; tests/fixtures/audit_allowlist): a private attribute the file does not
define (`._op`, `._modules`, `._forward_pre_hooks`; a tensor's `._version` excepted), a closure cell's contents, a
generator or a coroutine (frames that outlive a call and run code when freed) are findings, whatever the value they
are read from; the file's own private names stay its own. CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.audit import audit_file
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "audit_allowlist"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"


@pytest.mark.parametrize("name, rule, says", [
    ("c01_generator_finally.py", "dynamic_code", "yields inside a function"),
    ("c02_coroutine_send.py", "dynamic_code", "defines the coroutine _softmax"),
    ("c03_untraced_private_op.py", "introspection", "reads ._op: a private attribute this file does not define"),
    ("c04_private_module_state.py", "introspection", "reads ._forward_pre_hooks: a private attribute"),
    ("c05_cell_contents.py", "introspection", "reads .cell_contents"),
])
def test_private_reach_and_frames_that_outlive_a_call_are_findings(name, rule, says):
    findings = audit_file(FIXTURES / name)
    assert any(f.rule == rule and says in f.message for f in findings), findings


def test_the_files_own_private_names_and_a_tensors_version_pass_the_full_judge():
    assert audit_file(FIXTURES / "h01_own_private_state.py") == ()
    with Judge(EvalOptions(device="cpu", correctness_trials=2)) as judge:
        result = judge.evaluate(load_problem(SOFTMAX), load_candidate(FIXTURES / "h01_own_private_state.py"))
    assert result.status is Status.OK, result.reason
