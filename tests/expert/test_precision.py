"""The fp32 dot-product scheme is planned from the error model before the first candidate: exact where TF32-based
schemes would pass by luck, the faster scheme only with a margin."""

from __future__ import annotations

import importlib.util
import textwrap

import torch

from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from pipeline.expert.precision import FP32_TOLERANCE, accumulate, exact_slices, expected_max_error, plan, scheme_for
from pipeline.judge.compare import TOLERANCE
from tests.expert.problems import tiny


def test_the_plan_uses_the_judges_fp32_tolerance():
    assert FP32_TOLERANCE == TOLERANCE[torch.float32]


def test_kernelbench_sized_fp32_gemms_are_planned_exact():
    for k in (1024, 2048, 4096, 8192, 131072, 524288):
        for outputs in (4096 * 4096, 8192 * 8192, 256 * 256):
            assert plan(k, outputs) == "ieee", (k, outputs)


# The H100's largest errors against torch's fp32 GEMM (bench/results/2026-12-06-s19/precision.md), M = N = 4096:
# (operands, K, scheme) -> largest error. ieee matched torch exactly at every K measured.
H100 = {("randn", 1024, "tf32x3"): 2.75e-4, ("randn", 2048, "tf32x3"): 5.49e-4, ("randn", 4096, "tf32x3"): 1.11e-3,
        ("randn", 8192, "tf32x3"): 2.11e-3, ("linear", 1024, "tf32x3"): 2.98e-6, ("linear", 8192, "tf32x3"): 7.39e-6,
        ("randn", 1024, "tf32"): 1.30e-1, ("randn", 8192, "tf32"): 3.72e-1, ("linear", 8192, "tf32"): 1.24e-3}


def test_the_model_matches_the_h100_within_a_factor_of_two():
    for (operands, k, scheme), measured in H100.items():
        rms = (1.0, 1.0) if operands == "randn" else (3 ** -0.5, (3 * k) ** -0.5)
        model = expected_max_error(scheme, k, 4096 * 4096, *rms)
        assert measured / 2 <= model <= measured * 2 or (scheme == "tf32" and measured / 2 <= model * 1.5), (operands, k, scheme, model)
    for k in (2048, 8192):  # past the tolerance where the H100 left outputs outside it; ieee within half of it
        assert expected_max_error("tf32x3", k, 4096 * 4096) > FP32_TOLERANCE
        assert 2 * expected_max_error("ieee", k, 4096 * 4096) <= FP32_TOLERANCE


def test_a_faster_scheme_only_with_a_margin():
    assert plan(32, 512) == "tf32x3"  # a short reduction: three TF32 passes stay under half the tolerance
    assert plan(128, 512) == "tf32x3" and plan(256, 512) == "ieee"  # the tensor cores' accumulation grows with K
    assert plan(4096, 4096 * 4096, atol=1e-2) == "tf32x3"  # a half-precision tolerance
    assert plan(1 << 24, 1 << 24, atol=1e-2) == "ieee"
    assert (exact_slices(8192), exact_slices(16384), exact_slices(524288), exact_slices(3 * 8191)) == (1, 2, 64, 3)
    assert scheme_for("planned", "float16", 4096, 1 << 20) == "ieee"  # unused: half operands take no precision
    assert scheme_for("tf32x3", "float32", 4096, 1 << 24) == "tf32x3"  # a reviewer's or a variant's choice stands


def test_the_seed_names_its_scheme_and_margin():
    planned = Lowering.of(tiny("7_Linear_Residual_Tanh").read_text()).lower(Options()).source
    error = expected_max_error("tf32x3", 32, 16 * 32)
    assert 'input_precision="tf32x3"' in planned and f"expected largest error {error:.1e} at K = 32" in planned
    exact = Lowering.of(tiny("7_Linear_Residual_Tanh").read_text()).lower(Options(precision="ieee")).source
    assert 'input_precision="ieee"' in exact and "tf32" not in exact.split("\n", 1)[1]


def _chain(a: torch.Tensor, b: torch.Tensor, tile: int) -> torch.Tensor:
    """The fp32 sums an exact GEMM kernel makes, for rows of a times columns of b: each tile of `tile` products
    summed in one fp32 chain from zero, then added to the accumulator (tile = K: one chain over the whole K)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for start in range(0, a.shape[1], tile):
        part = torch.zeros_like(acc)
        for k in range(start, min(start + tile, a.shape[1])):
            part = part + a[:, k : k + 1] * b[k : k + 1, :]
        acc = acc + part
    return acc


def test_an_exact_gemm_sums_each_tile_from_zero_then_into_the_accumulator():
    """One chain of K fused multiply-adds rounds each step at the running sum's magnitude: at K = 8,192 on signed
    values it strayed further from the truth than cuBLAS (bench/results/2026-12-07-s25: level1/2 and level1/6
    refused by the float64 referee). The exact template sums each BLOCK_K tile from zero, then adds it: modelled
    here in fp32 steps, that two-level sum is several times closer to float64 than the one chain."""
    kernel = Lowering.of(tiny("1_GEMM_Square").read_text()).lower(Options(precision="ieee")).source
    assert accumulate("float32", "ieee") in kernel and "acc = tl.dot(a, b, acc" not in kernel
    generator = torch.Generator().manual_seed(3)
    a, b = torch.randn(8, 8192, generator=generator), torch.randn(8192, 8, generator=generator)
    truth = a.double() @ b.double()
    one_chain = (_chain(a, b, 8192).double() - truth).abs().median()
    two_levels = (_chain(a, b, 32).double() - truth).abs().median()
    assert two_levels * 3 < one_chain, (float(two_levels), float(one_chain))


_K_LOOP = """
import triton
import triton.language as tl

@triton.jit
def k_loop(a_ptr, b_ptr, c_ptr, K: tl.constexpr, BLOCK_K: tl.constexpr):
    r = tl.arange(0, 32)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((32, 32), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + r[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * 32 + r[None, :])
        LINE
    tl.store(c_ptr + r[:, None] * 32 + r[None, :], acc)
"""


def _sm90_dot_lines(line: str, tmp_path) -> list[str]:
    """The dot and float adds of the K loop above with `line` as its accumulation, compiled for sm_90 (on the CPU:
    Triton's passes run without a GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = tmp_path / "k_loop.py"
    path.write_text(textwrap.dedent(_K_LOOP).replace("LINE", line))
    spec = importlib.util.spec_from_file_location("k_loop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "K": "constexpr", "BLOCK_K": "constexpr"}
    compiled = triton.compile(ASTSource(module.k_loop, signature, {(3,): 256, (4,): 32}), target=GPUTarget("cuda", 90, 32))
    return [l.strip() for l in compiled.asm["ttir"].splitlines() if "tt.dot" in l or "arith.addf" in l]


def test_the_compiler_keeps_the_exact_gemms_two_levels(tmp_path):
    """Triton folds `acc + tl.dot(a, b)` into `tl.dot(a, b, acc)`: written plainly, the two-level sum above is one
    chain again on the GPU (session 27 found this after the float64 referee kept refusing the K = 524,288 GEMM). The
    template's line keeps the add: its dot starts from zero and a separate add takes it into acc."""
    folded = _sm90_dot_lines('acc += tl.dot(a, b, input_precision="ieee")', tmp_path)
    assert len(folded) == 1 and "tt.dot" in folded[0] and "%acc" in folded[0].split("tt.dot")[1], folded
    kept = _sm90_dot_lines(accumulate("float32", "ieee"), tmp_path)
    assert len(kept) == 2 and "%cst" in kept[0].split("tt.dot")[1] and "arith.addf" in kept[1], kept
