"""Each exact rewrite fires where its identity holds, keeps the module's results, and stays out where its
precondition fails."""

from __future__ import annotations

import pytest
import torch

from pipeline.expert.algebra import TRANSFORMS, SplitK, apply, lower_rules, simplify, split_k_slices
from pipeline.expert.capture import capture
from pipeline.expert.decompose import decompose
from pipeline.expert.interpret import run
from pipeline.expert.ir import Graph
from pipeline.expert.options import Options
from tests.expert.problems import build, fixture, tiny
from tests.expert.test_decompose import assert_same


def graph_of(path) -> Graph:
    return decompose(capture(path.read_text()).tape)


def live_ops(graph: Graph) -> list[tuple[str, str]]:
    return [(graph.node(i).op, graph.node(i).fn) for i in sorted(graph.live())]


def check_equivalent(path, graph: Graph, signed: bool = True) -> None:
    model, inputs, params = build(path, signed)
    with torch.no_grad():
        ref = model(*inputs)
    assert_same(run(graph, inputs, params), ref, atol=1e-4)
    for name, buffer in model.named_buffers():
        if buffer.is_floating_point():
            torch.testing.assert_close(params[name], buffer, atol=1e-5, rtol=1e-4)


CASES = [  # (problem, the rules expected to fire)
    (fixture("log_of_softmax"), {"identity_removal", "log_of_softmax"}),
    (fixture("linear_sum"), {"sum_of_linear"}),
    (tiny("11_Linear_BatchNorm1d_ReLU"), {"bias_before_batch_norm"}),
    (tiny("3_Conv2d_BatchNorm_GELU"), {"bias_before_batch_norm"}),
    (tiny("10_Conv2d_GroupNorm_Tanh_MaxPool"), {"reshape_sinking"}),
    (fixture("long_rows_norm"), {"one_pass_moments"}),
    (tiny("11_GroupNorm"), set()),  # its reshape back is the output: nothing after it to sink; rows fit registers
    (tiny("5_Linear_LayerNorm_Swish"), set()),  # a bias per column does not cancel in a norm over those columns
    (tiny("23_Softmax"), set()),
]


@pytest.mark.parametrize("path,expected", CASES, ids=lambda v: v.stem if hasattr(v, "stem") else "")
def test_each_rule_fires_where_it_applies_and_keeps_the_results(path, expected):
    graph, applied = simplify(graph_of(path), Options(algebra=True))
    assert set(applied) == expected
    check_equivalent(path, graph)


def test_log_of_softmax_leaves_no_division_and_identities_leave_nothing():
    graph, _ = simplify(graph_of(fixture("log_of_softmax")), Options(algebra=True))
    ops = live_ops(graph)
    assert ("pointwise", "div") not in ops
    assert not {("pointwise", "identity"), ("pointwise", "cast")} & set(ops)
    assert sum(fn == "relu" for _, fn in ops) == 1 and ("pointwise", "add") not in ops


def test_sum_of_linear_replaces_the_gemm_by_a_matrix_vector_product():
    before, after = graph_of(fixture("linear_sum")), simplify(graph_of(fixture("linear_sum")), Options(algebra=True))[0]
    assert sum(op == "matmul" for op, _ in live_ops(before)) == 2
    assert sum(op == "matmul" for op, _ in live_ops(after)) == 0


def test_bias_before_batch_norm_drops_the_bias_from_the_normalized_path():
    graph, _ = simplify(graph_of(tiny("11_Linear_BatchNorm1d_ReLU")), Options(algebra=True))
    users = graph.users()
    bias = next(n for n in graph.nodes if n.op == "param" and n.attr("name") == "linear.bias")
    live = graph.live()
    # the bias is still read, but only by the running mean's update (an effect), not by the output
    readers = [u for u in users[bias.id] if u in live]
    assert readers and all(graph.node(u).shape != (16, 64) for u in readers)


def test_reshape_sinking_puts_the_activation_before_the_reshape():
    graph, _ = simplify(graph_of(tiny("10_Conv2d_GroupNorm_Tanh_MaxPool")), Options(algebra=True))
    tanh = next(graph.node(i) for i in graph.live() if graph.node(i).fn == "tanh")
    assert tanh.shape == (2, 2, 4, 64)  # the group norm's [N, G, C/G, H*W] domain, not [N, C, H, W]


def test_matvec_is_lowered_as_a_reduction_and_stays_a_gemm_for_the_library():
    graph = graph_of(tiny("5_GEMV"))
    lowered, applied = lower_rules(graph, Options())
    assert applied == ["matvec_as_reduction"] and "matmul" not in {op for op, _ in live_ops(lowered)}
    check_equivalent(tiny("5_GEMV"), lowered)
    assert lower_rules(graph, Options(gemm="library")) == (graph, [])


def test_split_k_splits_only_gemms_whose_tiles_leave_the_gpu_idle():
    assert split_k_slices(32, 32, 2048) == 8 and split_k_slices(4096, 4096, 4096) == 1 and split_k_slices(32, 32, 100) == 1
    path = fixture("small_gemm_long_k")
    graph, applied = lower_rules(graph_of(path), Options(split_k=16))
    assert applied == ["split_k_8"]
    batched = [graph.node(i) for i in graph.live() if graph.node(i).op == "matmul"]
    assert [n.shape for n in batched] == [(8, 32, 32)]
    check_equivalent(path, graph)
    untouched, changed = apply(graph_of(tiny("1_GEMM_Square")), (("split", lambda: SplitK(16)),))
    assert not changed


def test_split_reduction_gives_partials_by_many_programs_and_a_combine():
    path = fixture("batchnorm_few_channels")
    graph, applied = lower_rules(graph_of(path), Options(split=True))
    assert applied == ["split_reduction"]
    reduces = [graph.node(i) for i in sorted(graph.live()) if graph.node(i).op == "reduce"]
    assert {n.attr("axes") for n in reduces} == {(2, 3), (0,)}  # per image and channel, then over the batch
    check_equivalent(path, graph)
    sliced, applied = lower_rules(graph_of(fixture("long_rows_norm")), Options(split=True))
    axes = {sliced.node(i).shape for i in sliced.live() if sliced.node(i).op == "reduce"}
    assert (32, 1, 8) in axes  # the 16384 rows of one column in 32 slices of 512
    check_equivalent(fixture("long_rows_norm"), sliced)
    assert lower_rules(graph_of(tiny("23_Softmax")), Options(split=True))[1] == []  # enough rows: nothing to split


def test_one_pass_moments_reads_the_row_once_for_both_statistics():
    from pipeline.expert.lowering import Lowering

    lowering = Lowering.of(fixture("long_rows_norm").read_text())
    plain, transformed = lowering.lower(Options()), lowering.lower(Options(algebra=True))
    passes = lambda source: source.count("for r0 in range(0, RNUMEL, RBLOCK)")  # noqa: E731
    assert passes(transformed.source) == passes(plain.source) - 1


def test_every_transformation_has_a_fixture_that_exercises_it():
    exercised = set().union(*(expected for _, expected in CASES))
    assert exercised == {name for name, _ in TRANSFORMS}
