"""Two structural variants of stage 2: a persistent grid for GEMMs (one program per SM looping over the output
tiles) and the vector width of pointwise kernels (elements per thread). Each is offered only where it can matter,
named at its gate, and judged correct on CPU (Triton's interpreter runs the same loop over tiles)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from pipeline.agents.replies import Bottleneck, Diagnosis, Evidence, Fix, KernelReply
from pipeline.expert.backend import ExpertBackend
from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from pipeline.expert.record import read
from pipeline.types import Status
from tests.expert.judging import CPU, Judge, judge_source, verdict_text
from tests.expert.problems import ROOT, tiny

SUITE = ROOT / "data" / "problems" / "suite"
BACKEND = ExpertBackend()

# 96 x 80 outputs in 16 x 16 tiles: 30 tiles for the interpreter's 4 programs, so each program loops 7 or 8 times,
# and the edges (80 = 5 * 16, K = 40 = 2.5 * 16) are masked.
LINEAR = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Linear with bias, then tanh."""

        def __init__(self, in_features, out_features):
            super().__init__()
            self.linear = nn.Linear(in_features, out_features)

        def forward(self, x):
            return torch.tanh(self.linear(x))


    def get_inputs():
        return [torch.rand(96, 40)]


    def get_init_inputs():
        return [40, 80]
''')


def plan_of(kind: str) -> Diagnosis:
    evidence = [Evidence(metric="m", value="1", interpretation="i")]
    return Diagnosis(bottlenecks=[Bottleneck(name=kind, evidence=evidence, fixes=[Fix(change="c", expected_gain_pct=5)])])


def seed_of(path: Path) -> str:
    return BACKEND.seed(path.read_text(encoding="utf-8"), "p", 1, 3).kernel


def test_a_persistent_grid_gemm_loops_over_every_tile_and_passes(tmp_path):
    problem = tmp_path / "linear_tanh.py"
    problem.write_text(LINEAR, encoding="utf-8")
    lowering = Lowering.of(LINEAR)
    source = lowering.lower(Options(persistent=True, gemm_tile=(16, 16, 16))).source
    assert "for tile in range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS):" in source
    assert "multi_processor_count if" in source and "NUM_PROGRAMS=programs" in source
    assert read(source).options.persistent
    with Judge(CPU) as judge:
        result = judge_source(judge, problem, source, tmp_path, "persistent")
    assert result.status is Status.OK, verdict_text(result)


def test_the_persistent_grid_is_offered_where_tiles_outnumber_the_sms():
    kernel = seed_of(SUITE / "level1" / "1_GEMM_Square.py")  # 4096^2 outputs: 1024 tiles of 128 x 128
    reply = BACKEND.rewrite(kernel, "parallel_mapping", "o", plan_of("launch_bound"), [], "3 ms")
    assert isinstance(reply, KernelReply) and reply.rationale.startswith("rule persistent_grid:"), reply.rationale
    assert "NUM_PROGRAMS" in reply.kernel and read(reply.kernel).options.persistent
    assert "persistent grid (one program per SM)" in reply.kernel  # the preamble names it
    small = seed_of(tiny("1_Linear_GELU_Scale"))  # one tile: a persistent grid would change nothing
    offers = [BACKEND.rewrite(small, "parallel_mapping", "o", plan_of("launch_bound"), [], "1 ms", feedback="no\n" * n)
              for n in range(4)]
    assert not any(isinstance(r, KernelReply) and r.rationale.startswith("rule persistent_grid:") for r in offers)


def test_no_persistent_grid_for_a_convolution_whose_template_has_none():
    """Many output tiles, but the implicit-GEMM convolution ignores the option: offering it would propose a kernel
    that differs from its parent in its record line alone."""
    kernel = seed_of(SUITE / "level1" / "22_Conv2d_3x3.py")
    offers = [BACKEND.rewrite(kernel, "parallel_mapping", "o", plan_of("launch_bound"), [], "1 ms", feedback="no\n" * n)
              for n in range(4)]
    assert not any(isinstance(r, KernelReply) and r.rationale.startswith("rule persistent_grid:") for r in offers)


def test_the_vector_width_sets_the_elements_per_thread_and_passes(tmp_path):
    path = tiny("16_GELU_Scale_Bias")
    lowering = Lowering.of(path.read_text(encoding="utf-8"))
    launches = {}
    for vector in (None, 4, 16):
        source = lowering.lower(Options(vector=vector, row_block=1024)).source
        launches[vector] = int(re.search(r"num_warps=(\d+)\)", source).group(1))
        with Judge(CPU) as judge:
            result = judge_source(judge, path, source, tmp_path, f"vector_{vector}")
        assert result.status is Status.OK, verdict_text(result)
    assert launches == {None: 4, 4: 8, 16: 2}  # 1024 elements: 32 threads a warp, 8, 4 or 16 elements a thread


def test_the_vector_width_is_a_memory_variant_of_large_pointwise_kernels():
    kernel = seed_of(SUITE / "level1" / "16_GELU_Scale_Bias.py")
    reply = BACKEND.rewrite(kernel, "memory", "o", plan_of("memory_bound"), [], "0.5 ms")
    assert isinstance(reply, KernelReply) and reply.rationale.startswith("rule vector_width:"), reply.rationale
    assert read(reply.kernel).options.vector == 4
    again = BACKEND.rewrite(reply.kernel, "memory", "o", plan_of("memory_bound"), [], "0.5 ms")
    assert again.rationale.startswith("rule vector_width:") and read(again.kernel).options.vector == 16
    small = seed_of(tiny("16_GELU_Scale_Bias"))  # 1024 elements: one block, nothing to gain
    first = BACKEND.rewrite(small, "memory", "o", plan_of("memory_bound"), [], "0.1 ms")
    assert not (isinstance(first, KernelReply) and first.rationale.startswith("rule vector_width:"))


def launch_bound_profile() -> "Measurements":
    from pipeline.agents.backend import Measurements
    from pipeline.profiler.report import Classification, Evidence as ProfileEvidence, ProfileReport

    overall = Classification("launch_bound", 60.0, (ProfileEvidence("launch__grid_size", 16, "16 blocks for 132 SMs"),), "too few blocks")
    report = ProfileReport("static_only", "c.py", "0" * 64, "p.py", "0" * 64, (), overall, None, None, None, None)
    return Measurements(None, report)


def test_a_launch_bound_plan_offers_the_persistent_grid_only_to_a_kernel_with_a_gemm():
    def fixes(kernel: str) -> list[str]:
        plan = BACKEND.diagnose(kernel, launch_bound_profile(), "parallel_mapping", "objective")
        return [f.change for b in plan.bottlenecks for f in b.fixes]

    row = fixes(seed_of(tiny("23_Softmax")))
    assert row and not any("persistent grid" in change for change in row)  # the row kernel keeps its other fixes
    assert any("persistent grid" in change for change in fixes(seed_of(tiny("1_GEMM_Square"))))
