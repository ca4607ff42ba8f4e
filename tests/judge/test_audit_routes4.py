"""Held-out red team 15 (session 26; tests/fixtures/audit_routes4, README.md the table): 4 of its 8 attempts got past
the static audit. The audit now refuses torch's global module hooks (`register_module_forward_hook`, `..._pre_hook`:
a hook on every module's forward, the reference's included) and attribute paths read by a str.format template
(`"{0.forward.__func__.__globals__}".format(self)`). Host compute by iterating a tensor in Python has no static mark;
beside a throwaway launch (a9, written in session 27) the run-time host probe counts every value `float()` took to
Python and the check refuses it. CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.audit import audit_file, audit_source
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "audit_routes4"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"


@pytest.mark.parametrize("name,rule", [("a1_enum_bltns.py", "dynamic_code"), ("a2_tunable_mp.py", "banned_import"),
                                       ("a3_global_hook.py", "monkey_patch"), ("a5_aten_fallback.py", "introspection"),
                                       ("a6_prehook_ref.py", "monkey_patch"), ("a7_fmt_frames.py", "introspection")])
def test_the_audit_refuses_the_routes_it_models(name, rule):
    assert rule in {f.rule for f in audit_file(FIXTURES / name)}, name


@pytest.mark.parametrize("text", ["{0.__globals__}", "{x.forward.__func__}", "{0.f_back}", "{0[a]._base}", "{0:{1.__dict__}}",
                                  "{0.register_module_forward_hook}"])
def test_a_format_template_that_reads_behind_its_argument_is_refused(text):
    assert "introspection" in {f.rule for f in audit_source(f"leak = {text!r}.format(object())\n")}, text


@pytest.mark.parametrize("text", ["{0.shape} rows of {1}", "{:>{width}}", "{name!r} {{literal}}", "{", "plain {0[1]}"])
def test_format_templates_of_honest_messages_pass(text):
    assert audit_source(f"message = {text!r}\n") == ()


def test_the_global_hook_is_found_however_it_is_imported():
    for source in ("from torch.nn.modules.module import register_module_forward_hook as h\nh(print)\n",
                   "import torch\ntorch.nn.modules.register_module_forward_pre_hook(print)\n",
                   "import torch\ngetattr(torch.nn.modules.module, 'register_module_forward_hook')(print)\n"):
        assert "monkey_patch" in {f.rule for f in audit_source(source)}, source


def test_host_compute_beside_a_throwaway_launch_fails_the_check():
    with Judge(EvalOptions(device="cpu", other_shapes=False)) as judge:
        result = judge.evaluate(load_problem(SOFTMAX), load_candidate(FIXTURES / "a9_host_iter_launch.py"))
    assert result.status is not Status.OK, result.reason
    assert "host" in result.reason, result.reason
