"""The templates compile for the H200 (sm_90) at the suite's full sizes, on this CPU: every kernel of a candidate
compiles, with no register spills (8 bytes at most: SPILL_ALLOWED_BYTES) and within the shared memory a block may have; GEMMs and convolutions reach
the tensor cores (wgmma). This is the static survey `egg profile --static-only` runs."""

from __future__ import annotations

import pytest

from pipeline.expert.lowering import prime
from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from pipeline.profiler.static import MAX_SHARED_BYTES_PER_BLOCK
from pipeline.profiler.survey import survey_candidate
from tests.expert.problems import ROOT

SUITE = ROOT / "data" / "problems" / "suite"
TF32X3 = "tf32x3"  # a scheme a reviewer may name: the tensor-core path of fp32 GEMMs, kept compiling
CASES = [  # (problem, options, kernels expected to use wgmma)
    ("level1/1_GEMM_Square.py", Options(), 0),  # fp32 at 1e-4: the plan is exact fp32 FMA (pipeline.expert.precision)
    ("level1/1_GEMM_Square.py", Options(precision=TF32X3), 1),
    ("level1/6_GEMM_Square_FP16.py", Options(), 1),
    ("level1/22_Conv2d_3x3.py", Options(precision=TF32X3), 1),
    ("level1/22_Conv2d_3x3.py", Options(), 0),
    ("level1/7_LogSoftmax.py", Options(), 0),  # rows of 16384 held in registers
    ("level1/11_GroupNorm.py", Options(), 0),  # rows of 524288 streamed
    ("level2/9_Linear_SiLU_Residual_BF16.py", Options(), 1),
    ("level3/1_MLP_3Layer.py", Options(split_k=16, precision=TF32X3), 3),
    ("level3/1_MLP_3Layer.py", Options(split_k=16), 0),
    ("level1/1_GEMM_Square.py", Options(precision="ieee", reduction="looped"), 0),  # the streaming_exact seed: FMA, no wgmma
    ("level1/1_GEMM_Square.py", Options(gemm_tile=(128, 128, 64), precision=TF32X3), 1),  # the largest fp32 tile of the variants' ladder
    ("level1/1_GEMM_Square.py", Options(gemm_tile=(64, 128, 32)), 0),  # the largest exact fp32 tile
    ("level1/1_GEMM_Square.py", Options(num_stages=5, precision=TF32X3), 1),  # the deepest pipelining variant
    ("level1/1_GEMM_Square.py", Options(num_stages=5), 0),
    ("level1/6_GEMM_Square_FP16.py", Options(gemm_tile=(128, 256, 64), num_stages=3), 1),  # the largest half tile
    ("level1/10_BatchNorm2d_Train.py", Options(split=True, algebra=True), 0),
    ("level1/1_GEMM_Square.py", Options(persistent=True, precision=TF32X3), 1),  # the persistent-grid variant: the loop over tiles
    ("level1/1_GEMM_Square.py", Options(persistent=True), 0),
    ("level1/6_GEMM_Square_FP16.py", Options(persistent=True), 1),
    ("level1/16_GELU_Scale_Bias.py", Options(vector=4), 0),  # the vector-width variant, both ways
    ("level1/16_GELU_Scale_Bias.py", Options(vector=16), 0),
]

# The general seeds take the batch (a GEMM's M) as a runtime argument, so a new batch size compiles nothing new: the
# largest tf32x3 tile (128x128x64, 8 warps) then keeps 8 bytes of its row masks in local memory (0 with M constexpr)
SPILL_ALLOWED_BYTES = 8


@pytest.fixture(scope="module", autouse=True)
def captured():
    prime([(SUITE / name).read_text() for name, _, _ in CASES])


@pytest.mark.parametrize("name,options,tensor_core_kernels", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_kernel_compiles_for_sm90_without_spills_within_shared_memory(tmp_path, name, options, tensor_core_kernels):
    problem = SUITE / name
    lowered = Lowering.of(problem.read_text()).lower(options)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(lowered.source)
    survey = survey_candidate(candidate, problem)
    assert not survey.errors, survey.errors
    assert len({launch.facts.kernel for launch in survey.launches}) == lowered.written.kernels
    for launch in survey.launches:
        assert launch.facts.spilled_bytes <= SPILL_ALLOWED_BYTES, launch.facts
        assert launch.facts.shared_bytes <= MAX_SHARED_BYTES_PER_BLOCK, launch.facts
    assert sum(launch.facts.uses_wgmma for launch in survey.launches) >= tensor_core_kernels
