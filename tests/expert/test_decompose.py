"""Every decomposition reproduces torch: the IR of each problem, run with torch, matches the module itself (plain
and signed inputs), buffers updated in place included. No Triton here: this checks the meaning of the IR."""

from __future__ import annotations

import pytest
import torch

from pipeline.expert.capture import capture
from pipeline.expert.decompose import decompose
from pipeline.expert.interpret import run
from tests.expert.problems import DEGENERATE, TINY, ZOO, build, fixture, label

PROBLEMS = [*TINY, *DEGENERATE, *ZOO]


def flat(value):
    return list(value) if isinstance(value, tuple) else [value]


def assert_same(out, ref, atol=1e-5):
    for o, r in zip(flat(out), flat(ref), strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        if r.is_floating_point():  # half outputs: a few ulps apart where the IR rounds per node and torch per call
            tol = max(atol, 4e-3) if r.dtype in (torch.float16, torch.bfloat16) else atol
            torch.testing.assert_close(o, r, atol=tol, rtol=tol)
        else:
            assert torch.equal(o, r)


@pytest.mark.parametrize("path", PROBLEMS, ids=label)
@pytest.mark.parametrize("signed", [False, True], ids=["rand", "randn"])
def test_the_ir_computes_what_the_module_computes(path, signed):
    model, inputs, params = build(path, signed)
    graph = decompose(capture(path.read_text()).tape)
    try:
        with torch.no_grad():
            ref = model(*inputs)
    except RuntimeError as error:  # a loss that needs targets in [0, 1] has no signed trial (nor has the judge)
        pytest.skip(f"the module itself rejects signed inputs: {error}")
    assert_same(run(graph, inputs, params), ref)
    for name, buffer in model.named_buffers():  # batch norm's running statistics, updated as the reference does
        if buffer.is_floating_point():
            torch.testing.assert_close(params[name], buffer, atol=1e-6, rtol=1e-5)


def test_composites_become_primitives_and_unknown_calls_stay_library_calls():
    graph = decompose(capture(fixture("zoo_library").read_text()).tape)
    library = sorted({n.fn for n in graph.nodes if n.op == "library"})
    assert library == ["F.avg_pool2d", "F.interpolate", "F.max_pool2d", "torch.cat"]  # the cumsum is a scan (session 28)
    assert [(n.fn, n.attr("axis")) for n in graph.nodes if n.op == "scan"] == [("sum", 3)]
    kinds = {n.op for n in graph.nodes if n.origin == "softmax"}
    assert kinds == {"pointwise", "reduce"}  # softmax itself is max, exp, sum and a division


def test_the_recording_follows_python_control_flow():
    graph = decompose(capture(fixture("control_flow").read_text()).tape)
    assert sum(n.op == "matmul" for n in graph.nodes) == 3  # the loop over three layers, unrolled
    assert any(n.op == "reduce" for n in graph.nodes)  # the branch the batch size takes


def test_selu_and_celu_called_through_torch_are_pointwise(tmp_path):
    """KernelBench's 27_SELU_ calls torch.selu, which stayed a library call (no seed): now it is pointwise."""
    path = tmp_path / "selu.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, x):\n        return torch.selu(x) + torch.celu(x, 0.5) + torch.selu(2 * x)\n\n\n"
                    "def get_inputs():\n    return [torch.randn(8, 32)]\n\n\ndef get_init_inputs():\n    return []\n")
    graph = decompose(capture(path.read_text()).tape)
    assert not [n.fn for n in graph.nodes if n.op == "library"]
    for signed in (False, True):
        model, inputs, params = build(path, signed)
        with torch.no_grad():
            assert_same(run(graph, inputs, params), model(*inputs))


def test_pooling_is_a_reduction_over_windows_and_what_no_rule_covers_stays_a_library_call():
    """Max and average pooling with stride = kernel and no padding (the last incomplete window dropped), and adaptive
    pooling whose output divides the input, are the input viewed window by window and reduced (zoo_pooling);
    overlapping, padded and dilated windows are a `window` node reduced over its window axes (zoo_windows); both are
    checked against torch with the others above. Ceil mode that adds a window, and an average that leaves the
    padding out of its count, stay library calls (zoo_library)."""
    graph = decompose(capture(fixture("zoo_pooling").read_text()).tape)
    assert not [n.fn for n in graph.nodes if n.op == "library"]
    assert {n.attr("axes") for n in graph.nodes if n.op == "reduce"} >= {(3, 5), (3, 5, 7)}
    graph = decompose(capture(fixture("zoo_windows").read_text()).tape)
    assert not [n.fn for n in graph.nodes if n.op == "library"]
    assert sorted(len(n.attr("kernel")) for n in graph.nodes if n.op == "window") == [1, 1, 2, 2, 3]
    graph = decompose(capture(fixture("zoo_library").read_text()).tape)
    assert {"F.max_pool2d", "F.avg_pool2d"} <= {n.fn for n in graph.nodes if n.op == "library"}


def test_triangles_and_an_einsum_that_is_a_matmul_lower_and_other_einsums_stay_library_calls():
    """triu and tril of a product (any diagonal) are a where on the indices of their last two dimensions; an einsum
    contracting the first operand's last index with a 2-D second's first is a matmul (zoo_glue, checked against
    torch with the others above). An einsum of another form stays a library call."""
    graph = decompose(capture(fixture("zoo_glue").read_text()).tape)
    assert not [n.fn for n in graph.nodes if n.op == "library"]
    assert sum(n.op == "matmul" for n in graph.nodes) == 2 and any(n.op == "iota" for n in graph.nodes)
    other = fixture("zoo_glue").read_text().replace('"bijl,lk->bijk"', '"bijl,kl->bijk"').replace("torch.randn(24, 16)]", "torch.randn(16, 24)]")
    graph = decompose(capture(other).tape)
    assert [n.fn for n in graph.nodes if n.op == "library"] == ["torch.einsum"]


def test_scaled_dot_product_attention_and_the_triplet_loss_lower():
    """F.scaled_dot_product_attention (causal, boolean and float masks, a given scale) is scores, a masked softmax and
    the value product; the triplet margin loss is distances and a clamp (zoo_attention, zoo_triplet, checked against
    torch with the others above). Attention with dropout stays a library call."""
    for name in ("zoo_attention", "zoo_triplet"):
        graph = decompose(capture(fixture(name).read_text()).tape)
        assert not [n.fn for n in graph.nodes if n.op == "library"], name
    dropping = fixture("zoo_attention").read_text().replace("plain = F.scaled_dot_product_attention(q, k, v)",
                                                           "plain = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)")
    graph = decompose(capture(dropping).tape)
    assert [n.fn for n in graph.nodes if n.op == "library"] == ["F.scaled_dot_product_attention"]
