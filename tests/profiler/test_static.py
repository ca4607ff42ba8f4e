"""Compiling for sm_90 without a GPU: registers, spills, shared memory, wgmma, and binary identity."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.profiler.static import (
    StaticCompileError,
    StaticFacts,
    compile_sm90,
    facts_for_call,
)
from pipeline.types import from_jsonable, to_jsonable
from tests.profiler import kernels as K

SCALE_SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "scale": "fp32"}


def gemm_facts(block_m: int, block_n: int, block_k: int, num_warps: int, dtype=torch.float16) -> StaticFacts:
    a = torch.empty(4096, 4096, dtype=dtype, device="meta")
    args = (a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    return facts_for_call(K.matmul_kernel, args, {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}, num_warps=num_warps)


def test_elementwise_kernel_compiles_with_few_registers_and_no_shared_memory():
    facts = compile_sm90(K.scale_kernel, SCALE_SIGNATURE, {"BLOCK": 1024})
    assert facts.kernel == "scale_kernel" and facts.num_warps == 4 and facts.num_stages == 3
    assert 0 < facts.registers <= 64
    assert facts.spilled_bytes == 0 and facts.shared_bytes == 0
    assert not facts.uses_wgmma and not facts.uses_tma
    assert facts.constexprs == {"BLOCK": 1024}
    assert len(facts.binary_sha256) == 64 and facts.compile_s >= 0


def test_identical_configs_compile_to_the_same_binary_and_a_new_block_to_another():
    first = compile_sm90(K.scale_kernel, SCALE_SIGNATURE, {"BLOCK": 1024})
    again = compile_sm90(K.scale_kernel, SCALE_SIGNATURE, {"BLOCK": 1024})
    other = compile_sm90(K.scale_kernel, SCALE_SIGNATURE, {"BLOCK": 2048})
    assert first.binary_sha256 == again.binary_sha256
    assert other.binary_sha256 != first.binary_sha256


@pytest.mark.parametrize("num_warps", [4, 8])
def test_fp16_gemm_with_large_tiles_uses_wgmma(num_warps):
    facts = gemm_facts(128, 128, 64, num_warps)
    assert facts.uses_wgmma
    assert facts.registers > 0 and facts.spilled_bytes == 0


def test_shared_memory_grows_with_the_tiles():
    small, large = gemm_facts(64, 64, 32, 4), gemm_facts(128, 128, 64, 4)
    assert 0 < small.shared_bytes < large.shared_bytes
    assert not small.launch_problems()


def test_tiles_too_large_for_the_h200_are_known_before_any_gpu_time():
    facts = gemm_facts(256, 256, 128, 8)
    assert facts.shared_bytes > 232_448
    assert "shared memory" in facts.launch_problems()[0]


def test_a_huge_row_in_registers_spills():
    x = torch.empty(8, 65536, device="meta")
    facts = facts_for_call(K.row_sum_kernel, (x, x, 65536, 65536), {"BLOCK": 16384})
    assert facts.registers == 255 and facts.spilled_bytes > 0
    assert any("spills" in p for p in facts.launch_problems())


def test_arguments_are_specialized_like_triton_launches_them():
    x = torch.empty(4096, device="meta")
    aligned = facts_for_call(K.scale_kernel, (x, x, 4096, 2.0), {"BLOCK": 1024})
    one = facts_for_call(K.scale_kernel, (x, x, 1, 2.0), {"BLOCK": 1024})
    assert one.constexprs["n"] == 1  # Triton turns an int 1 into a constant
    assert aligned.binary_sha256 != one.binary_sha256


def test_num_warps_in_the_launch_kwargs_wins():
    x = torch.empty(4096, device="meta")
    assert facts_for_call(K.scale_kernel, (x, x, 4096, 2.0), {"BLOCK": 1024, "num_warps": 8}).num_warps == 8


def test_a_bad_call_is_a_static_compile_error_not_a_crash():
    with pytest.raises(StaticCompileError):
        facts_for_call(K.scale_kernel, (1, 2), {})
    with pytest.raises(StaticCompileError):
        facts_for_call(lambda: None, (), {})
    with pytest.raises(StaticCompileError, match="no type or value for n"):
        compile_sm90(K.scale_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "scale": "fp32"}, {"BLOCK": 64})


def test_static_facts_round_trip_through_json():
    facts = compile_sm90(K.scale_kernel, SCALE_SIGNATURE, {"BLOCK": 1024})
    assert from_jsonable(StaticFacts, json.loads(json.dumps(to_jsonable(facts)))) == facts
