"""Held-out red team 14 (session 26; tests/fixtures/audit_routes3, README.md the table): 14 of 15 cheats got ok on
7b3bf98. The audit now refuses 12 of them: a module named in a string (`operator.getitem(vars(torch), "sys")`), a
dunder, frame attribute or `handle` named in a dotted string (`attrgetter("run.__closure__")`, a namespace's
`"__array_interface__"` key), numpy or threading read from a value it cannot trace, and a private attribute read
from anything but the file's own objects (binding the same name elsewhere no longer makes it the file's); since
session 27 also c10 (an output cache keyed on `hash(x)`, stored with `update`) and c09 (`redispatch` below the Python
key). Open: the run-time half: the instruments are still objects in the candidate's process. The honest kernels pass
the audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge.audit import audit_file, audit_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit_routes3"
CAUGHT = ["c01_numpy_lambda_arrayiface.py", "c02_thread_param_untraced.py", "c03_sys_via_getitem_ctypes.py",
          "c04_reference_model_via_frames.py", "c05_forged_launch_count.py", "c06_edit_work_recorder.py",
          "c07_interp_vars_handle.py", "c08_match_capture_numpy.py", "c11_host_probe_switched_off.py",
          "c12_watch_guard_switched_off.py", "c14_reference_via_subclasses.py", "c15_exception_args_gemm.py"]


@pytest.mark.parametrize("name", CAUGHT)
def test_the_audit_refuses_the_routes_it_now_models(name):
    assert {f.rule for f in audit_file(FIXTURES / name)} & {"introspection", "banned_import"}, name


@pytest.mark.parametrize("name", ["h1_sum_atomic_split.py", "h2_softmax_online_blocks.py", "h3_gemm_strided_autotune.py"])
def test_the_honest_kernels_have_no_finding(name):
    assert audit_file(FIXTURES / name) == ()


def test_an_output_cache_keyed_on_a_tensors_hash_is_found():
    """c10 (session 27): `hash(x)` is a tensor's identity, and `memo.update([(key, ...)])` a store like `memo[key] = ...`;
    a cache keyed on a shape's hash stays a shape key (flagged only where forward returns what it stored)."""
    assert {f.rule for f in audit_file(FIXTURES / "c10_output_cache_hash_version.py")} == {"output_cache"}
    shapes = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
              "        self.plans = getattr(self, 'plans', {})\n        self.plans.update({hash(x.shape): 3})\n        return x * 1\n")
    assert "output_cache" not in {f.rule for f in audit_source(shapes)}
    merged = ("import torch\nclass ModelNew(torch.nn.Module):\n    memo = {}\n    def forward(self, x):\n"
              "        self.memo |= {hash(x): x}\n        return self.memo[hash(x)]\n")
    assert "output_cache" in {f.rule for f in audit_source(merged)}


def test_operators_called_below_the_judges_dispatch_keys_are_found():
    """c09 (session 27): `aten.exp.default.redispatch(torch.DispatchKeySet(torch.DispatchKey.CPU), x)` runs torch's
    softmax where the work recorder (a Python dispatch mode) sees nothing; dispatch keys and `.redispatch` are findings."""
    assert "tensor_subclass" in {f.rule for f in audit_file(FIXTURES / "c09_redispatch_below_python_key.py")}
    assert "tensor_subclass" in {f.rule for f in audit_source("import torch\nf = torch.ops.aten.exp.default\ny = f.redispatch\n")}
