"""Each lowering rule makes a candidate the real judge passes (CPU, Triton's interpreter), and the candidate is
made the way the rule says: the kernel kinds, the record line, the launches."""

from __future__ import annotations

import re

import pytest

from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from pipeline.expert.record import read
from pipeline.types import Status
from tests.expert.judging import CPU, Judge, judge_source, verdict_text
from tests.expert.problems import ROOT, fixture, tiny

CASES = [  # (id, problem, options, a rule the record must name, text the source must hold)
    ("pointwise_fusion", tiny("17_Clamp_Tanh_Chain"), Options(), "pointwise_fusion", "_tanh("),
    ("pointwise_zoo", fixture("zoo_activations"), Options(), "pointwise_fusion", "tl.sigmoid("),
    ("row_reduction_in_registers", tiny("23_Softmax"), Options(), "row_reduction", "rindex = tl.arange(0, RBLOCK)"),
    ("row_reduction_streamed", tiny("21_KLDiv_PerRow"), Options(reduction="looped"), "row_reduction", "for r0 in range(0, RNUMEL, RBLOCK)"),
    ("argmax_streamed", tiny("14_Argmax_Dim1"), Options(reduction="looped", row_block=16), "row_reduction", "_index = tl.where"),
    ("argmax_ties_streamed", fixture("argmax_ties"), Options(reduction="looped", row_block=8), "row_reduction", "acc1 == best1"),
    ("softmax_streamed_one_pass", tiny("23_Softmax"), Options(reduction="looped", row_block=16), "row_reduction", "max and sum of exp(x - max)"),
    ("masked_softmax_streamed", fixture("masked_softmax_rows"), Options(reduction="looped", row_block=16), "row_reduction", "grown"),
    ("log_softmax_streamed", fixture("log_of_softmax"), Options(reduction="looped", row_block=16), "row_reduction", "max and sum of exp(x - max)"),
    ("batch_norm_streamed", tiny("10_BatchNorm2d_Train"), Options(reduction="looped", row_block=32), "row_reduction", "# last pass"),
    ("losses", fixture("zoo_losses"), Options(), "row_reduction", "tl.where"),
    ("reductions", fixture("zoo_reductions"), Options(), "row_reduction", "tl.argmin"),
    ("pooling_windows_tile", fixture("zoo_pooling"), Options(), "row_reduction", "_max_pool3d("),
    ("pooling_windows_padded", fixture("zoo_windows"), Options(), "row_reduction", 'other=float("-inf"))'),
    ("masked_fill_attention", fixture("masked_attention"), Options(), "triton_gemm_epilogue", "tl.where("),
    ("triangles_and_einsum", fixture("zoo_glue"), Options(), "triton_gemm_epilogue", "tl.where("),
    ("scaled_dot_product_attention", fixture("zoo_attention"), Options(), "row_reduction", "tl.dot"),
    ("multi_head_attention", fixture("zoo_mha"), Options(), "triton_gemm_epilogue", "def gemm5_multi_head_attention_forward_kernel("),
    ("triplet_margin_loss", fixture("zoo_triplet"), Options(), "row_reduction", "tl.sqrt("),
    ("norms", fixture("zoo_norms"), Options(), "row_reduction", "tl.rsqrt"),
    ("triton_gemm_tf32x3", tiny("7_Linear_Residual_Tanh"), Options(precision="tf32x3"), "triton_gemm_epilogue", 'input_precision="tf32x3"'),
    ("triton_gemm_ieee", tiny("1_Linear_GELU_Scale"), Options(precision="ieee"), "triton_gemm_epilogue", 'input_precision="ieee"'),
    ("half_results_rounded", fixture("half_linear_silu"), Options(), "triton_gemm_epilogue", ").to(tl.float16).to(tl.float32)"),
    ("triton_bmm_strided", tiny("8_BMM_Scale_Softmax"), Options(), "triton_gemm_epilogue", "bidx"),
    ("matmul_zoo", fixture("zoo_matmuls"), Options(), "triton_gemm_epilogue", "tl.dot"),
    ("library_gemm", tiny("1_Linear_GELU_Scale"), Options(gemm="library"), "library_gemm_epilogue", "torch.matmul("),
    ("implicit_gemm_conv", tiny("2_Conv2d_ReLU_BiasAdd"), Options(), "implicit_gemm_conv", "ih0 = oh * 1 - 1"),
    ("conv_strided_dilated", fixture("conv_strided"), Options(), "implicit_gemm_conv", "ih0 = oh * 2 - 2"),
    ("library_conv", tiny("3_Conv2d_BatchNorm_GELU"), Options(conv="library"), "library_conv", "F.conv2d("),
    ("library_call", fixture("zoo_library"), Options(), "library_call", "F.interpolate("),
    ("scans", fixture("zoo_scans"), Options(row_block=64), "blocked_scan", "tl.cumprod("),
    ("library_transposed_conv", tiny("4_ConvTranspose2d_Swish_BiasAdd"), Options(), "library_call", "F.conv_transpose2d("),
    ("matvec_as_reduction", tiny("5_GEMV"), Options(), "matvec_as_reduction", "tl.sum("),
    ("split_k", fixture("small_gemm_long_k"), Options(split_k=16), "split_k_8", "tl.sum("),
    ("exact_split_k", fixture("long_k_gemm"), Options(), "exact_split_k_2", "tl.sum("),
    ("control_flow", fixture("control_flow"), Options(), "triton_gemm_epilogue", "tl.dot"),
    ("split_reduction", fixture("batchnorm_few_channels"), Options(split=True), "split_reduction", "self.bn.running_var"),
    ("split_single_axis", fixture("long_rows_norm"), Options(split=True, algebra=True), "one_pass_moments", "tl.maximum("),
]


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


@pytest.mark.parametrize("name,problem,options,rule,text", CASES, ids=[c[0] for c in CASES])
def test_each_lowering_rule_gives_a_candidate_that_passes_the_judge(judge, tmp_path, name, problem, options, rule, text):
    lowering = Lowering.of(problem.read_text())
    lowered = lowering.lower(options)
    record = read(lowered.source)
    assert record is not None and rule in record.rules and record.options == options
    assert text in lowered.source
    assert not lowering.delegates(lowered)
    result = judge_source(judge, problem, lowered.source, tmp_path, name)
    assert result.status is Status.OK, verdict_text(result)
    assert result.kernels_launched


TRANSFORMED = [  # (rule, problem, what the plain lowering has and the transformed one no longer has)
    ("reshape_sinking", tiny("10_Conv2d_GroupNorm_Tanh_MaxPool"), r"def fused\d+_tanh_kernel"),  # the tanh joins the norm
    ("bias_before_batch_norm", tiny("11_Linear_BatchNorm1d_ReLU"), r"tl\.load\(linear_bias_ptr \+ ni"),  # no bias in the GEMM
    ("sum_of_linear", fixture("linear_sum"), r"tl\.dot\("),  # no GEMM left
    ("log_of_softmax", fixture("log_of_softmax"), r"\(t\d+ / t\d+\)"),  # no division by the sum
]


@pytest.mark.parametrize("rule,problem,gone", TRANSFORMED, ids=[t[0] for t in TRANSFORMED])
def test_transformed_candidates_pass_the_judge_without_the_work_the_rule_removes(judge, tmp_path, rule, problem, gone):
    lowering = Lowering.of(problem.read_text())
    plain, transformed = lowering.lower(Options()), lowering.lower(Options(algebra=True))
    assert rule in transformed.rewrites
    assert re.search(gone, plain.source) and not re.search(gone, transformed.source)
    result = judge_source(judge, problem, transformed.source, tmp_path, rule)
    assert result.status is Status.OK, verdict_text(result)


def test_the_library_seed_of_a_lone_gemm_would_be_banned_and_is_recognized_as_such():
    lowering = Lowering.of(tiny("1_GEMM_Square").read_text())
    with pytest.raises(ValueError, match="nothing to launch"):
        lowering.lower(Options(gemm="library"))
    conv = Lowering.of(tiny("22_Conv2d_3x3").read_text())
    assert conv.delegates(conv.lower(Options(conv="library")))  # conv in torch, only the bias in Triton


def test_the_candidate_keeps_the_problem_init_so_parameters_match():
    source = Lowering.of(tiny("3_ResNetBasicBlock").read_text()).lower(Options()).source
    assert "self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)" in source
    assert "self.bn2.running_mean" in source  # the running statistics are written as the reference writes them
    assert "num_batches_tracked.add_(1)" in source


def test_half_results_are_rounded_where_eager_torch_rounds_them():
    """Each recorded call's fp16/bf16 result is rounded (the linear after its bias add, the SiLU, the residual add),
    never a value inside one call (the matmul before cuBLAS adds the bias); fp32 problems round nothing."""
    from pipeline.expert.values import rounded_values

    bf16 = Lowering.of((ROOT / "data/problems/suite/level2/9_Linear_SiLU_Residual_BF16.py").read_text()).graph
    assert sorted((bf16.node(i).origin, bf16.node(i).fn) for i in rounded_values(bf16)) == [("add", "add"), ("linear", "add"), ("silu", "silu")]
    assert rounded_values(Lowering.of(tiny("1_Linear_GELU_Scale").read_text()).graph) == frozenset()


@pytest.mark.parametrize("problem", [tiny("23_Softmax"), fixture("masked_softmax_rows")], ids=["softmax", "masked_with_logsumexp"])
def test_a_streamed_softmax_reads_its_rows_twice_not_three_times(problem):
    """The max and the sum of exp(x - max) share one walk of the row (rescaled as the max grows); the last walk
    writes the outputs: two loops over the row, where one per level of reduction made three."""
    source = Lowering.of(problem.read_text()).lower(Options(reduction="looped", row_block=16)).source
    start = source.index("@triton.jit\ndef ")
    kernel = source[start:source.index("\ndef ", start + len("@triton.jit\ndef "))]
    assert kernel.count("for r0 in range(0, RNUMEL, RBLOCK)") == 2, kernel



def test_a_seed_keeps_what_the_model_has_beyond_forward(judge, tmp_path):
    """Class attributes, helper methods, properties, buffers and module-level names of the problem's Model are the
    candidate's too (a ResNet block's `expansion`, its `_make_layer`), and `Model` inside the class is `ModelNew`."""
    problem = fixture("class_attributes")
    lowered = Lowering.of(problem.read_text()).lower(Options())
    source = lowered.source
    for text in ("expansion = 1", 'kind: str = "residual"', "def _make_block(", "@property", "super(ModelNew, self)",
                 "ModelNew.expansion", "HIDDEN_SCALE = 2", "class Block("):
        assert text in source, text
    assert "super(Model," not in source and "Model.expansion" not in source.replace("ModelNew.expansion", "")
    result = judge_source(judge, problem, source, tmp_path, "class_attributes")
    assert result.status is Status.OK, verdict_text(result)
    namespace: dict = {}
    exec(compile(source, str(tmp_path / "class_attributes.py"), "exec"), namespace)  # a repository fixture: trusted
    built = namespace["ModelNew"](16)
    assert (built.expansion, built.kind, built.out_features, built.width) == (1, "residual", 32, 32)
    assert built.shift.shape == (32,) and isinstance(built.block, namespace["Block"])
