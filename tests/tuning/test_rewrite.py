"""Writing a configuration back into kernel source: exact text edits, and rewritten files that still run
(checked under TRITON_INTERPRET=1 in a child process against the originals)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.tuning.rewrite import RewriteError, bake_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "candidates"
AUTOTUNED = ROOT / "tests" / "fixtures" / "audit" / "autotuned_matmul.py"
GEMM = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 2, "num_stages": 2}


def test_values_passed_through_variables_are_baked_where_assigned():
    source = (EXAMPLES / "matmul_triton.py").read_text()
    baked = bake_config(source, "matmul_kernel", GEMM, note="egg tuned: 32x16x16")
    assert "    block_m = 32\n    block_n = 16\n    block_k = 16\n" in baked  # `block_m = block_n = ...` split in two
    assert "BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=2, num_stages=2)" in baked
    assert "# egg tuned: 32x16x16\n@triton.jit\ndef matmul_kernel" in baked
    assert "# 64x64 tiles suit the H200" in baked  # comments survive
    assert baked.count("\n") == source.count("\n") + 2


def test_the_autotune_decorator_goes_and_every_value_is_passed():
    source = AUTOTUNED.read_text()
    baked = bake_config(source, "matmul_kernel", GEMM)
    assert "@triton.autotune" not in baked and "@triton.heuristics" in baked
    assert "c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, num_warps=2, num_stages=2)" in baked


def test_values_equal_to_the_current_launch_keep_their_shape_derived_expression():
    source = (EXAMPLES / "softmax_triton.py").read_text()
    baked = bake_config(source, "softmax_row_kernel", {"BLOCK_SIZE": 32, "num_warps": 8}, current={"BLOCK_SIZE": 32, "num_warps": 4})
    assert "block_size = triton.next_power_of_2(n_cols)" in baked
    assert "BLOCK_SIZE=block_size, num_warps=8)" in baked


KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr, FLAG: tl.constexpr):
    pass


def launch(x, block, opts):
    {body}
'''


@pytest.mark.parametrize(
    ("body", "config", "expected"),
    [
        ("k[(1,)](x, x.numel(), BLOCK=64, FLAG=True, num_warps=4)", {"BLOCK": 128, "num_warps": 8},
         "k[(1,)](x, x.numel(), BLOCK=128, FLAG=True, num_warps=8)"),
        ("k[(1,)](x, x.numel(), 64, True)", {"BLOCK": 256}, "k[(1,)](x, x.numel(), 256, True)"),
        ("b: int = 64\n    k[(1,)](x, 1, BLOCK=b, FLAG=1)", {"BLOCK": 32}, "b: int = 32"),
        ("if x:\n        b = 64\n    else:\n        b = 16\n    k[(1,)](x, 1, BLOCK=b, FLAG=1)", {"BLOCK": 32}, "        b = 32\n    else:\n        b = 32"),
        ("k[(1,)]()", {"num_stages": 3}, "k[(1,)](num_stages=3)"),
    ],
)
def test_launch_edits(body, config, expected):
    baked = bake_config(KERNEL.format(body=body), "k", config)
    assert expected in baked


@pytest.mark.parametrize(
    ("body", "config", "message"),
    [
        ("k[(1,)](x, 1, **opts)", {"BLOCK": 64}, "passes **kwargs"),
        ("k[(1,)](x, 1, BLOCK=block, FLAG=1)", {"BLOCK": 64}, "which its caller chooses"),
        ("b = 16\n    b *= 2\n    k[(1,)](x, 1, BLOCK=b, FLAG=1)", {"BLOCK": 64}, "updated in place"),
        ("b, c = 16, 1\n    k[(1,)](x, 1, BLOCK=b, FLAG=c)", {"BLOCK": 64}, "unpacked"),
        ("b = 16\n    k[(1,)](x, 1, BLOCK=b, FLAG=b)", {"BLOCK": 64, "FLAG": 1}, "two parameters"),
        ("pass", {"BLOCK": 64}, "no launch"),
        ("k[(1,)](x, 1)", {"BLOCK_Q": 64}, "no constexpr parameter"),
    ],
)
def test_what_cannot_be_baked_safely_is_refused_with_the_reason(body, config, message):
    with pytest.raises(RewriteError, match=re.escape(message)):
        bake_config(KERNEL.format(body=body), "k", config)


RUNNER = textwrap.dedent('''
    import importlib.util, json, sys
    import torch

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    report = {}
    torch.manual_seed(0)
    a, b = torch.randn(40, 24), torch.randn(24, 36)
    original = load(sys.argv[1], "original_gemm").ModelNew()(a, b)
    tuned = load(sys.argv[2], "tuned_gemm").ModelNew()(a, b)
    report["gemm"] = torch.allclose(tuned, original, atol=1e-4, rtol=1e-4)
    autotuned = load(sys.argv[3], "tuned_autotuned").ModelNew()(a, b)
    report["autotuned"] = torch.allclose(autotuned, a @ b, atol=1e-4, rtol=1e-4)
    x = torch.randn(5, 300)
    softmax = load(sys.argv[4], "tuned_softmax").ModelNew()(x)
    report["softmax"] = torch.allclose(softmax, torch.softmax(x, -1), atol=1e-5, rtol=1e-5)
    print(json.dumps(report))
''')


def test_rewritten_kernels_still_run_and_agree_with_the_originals(tmp_path):
    files = {
        "gemm.py": bake_config((EXAMPLES / "matmul_triton.py").read_text(), "matmul_kernel", GEMM),
        "autotuned.py": bake_config(AUTOTUNED.read_text(), "matmul_kernel", GEMM),
        "softmax.py": bake_config((EXAMPLES / "softmax_triton.py").read_text(), "softmax_row_kernel",
                                  {"BLOCK_SIZE": 512, "num_warps": 8}, current={"BLOCK_SIZE": 512, "num_warps": 4}),
        "runner.py": RUNNER,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    paths = [str(EXAMPLES / "matmul_triton.py")] + [str(tmp_path / n) for n in ("gemm.py", "autotuned.py", "softmax.py")]
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py"), *paths], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"gemm": True, "autotuned": True, "softmax": True}
