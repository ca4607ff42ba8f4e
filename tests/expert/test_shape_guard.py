"""A drop-in ModelNew from the expert backend is right on the problem's shapes or refuses the input in one line:
its kernels are written for the recorded sizes, strides and dtypes (the batch left free where the seed is general
in it: tests/expert/test_general.py), and any other tensor is refused before a kernel runs (never a wrong answer,
never an out-of-bounds read)."""

from __future__ import annotations

import pytest
import torch

from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from tests.expert.problems import tiny


def model_new(problem: str, tmp_path, *init):
    source = Lowering.of(tiny(problem).read_text()).lower(Options()).source
    path = tmp_path / f"{problem}.py"
    path.write_text(source)
    namespace: dict = {"__name__": "candidate"}
    exec(compile(source, str(path), "exec"), namespace)  # a repository problem's seed: trusted here
    return namespace["ModelNew"](*init)


@pytest.mark.parametrize("shape,dtype", [((16, 100), torch.float32), ((16, 64), torch.float64), ((8, 100), torch.float32)])
def test_another_shape_or_dtype_is_refused_in_one_line(tmp_path, shape, dtype):
    model = model_new("23_Softmax", tmp_path)
    x = torch.randn(*shape, dtype=dtype)
    with pytest.raises(ValueError) as refused:
        model(x)
    message = str(refused.value)
    assert "\n" not in message and f"specialised to x of shape [{x.shape[0]}, 64], strides [64, 1], torch.float32" in message
    assert f"got shape {list(x.shape)}" in message


def test_a_view_of_another_layout_is_copied_contiguous_before_the_guard():
    """A user's transposed or sliced tensor is no other shape: the seed copies it into the layout its kernels index
    (nothing is copied for a contiguous input) and the guard sees the recorded strides (the judge's layout sets)."""
    source = Lowering.of(tiny("23_Softmax").read_text()).lower(Options()).source
    forward = source[source.index("def forward"):]
    assert forward.index("x = x.contiguous()") < forward.index("_specialised_to('x', x, (_egg_b, 64), (64, 1)")


def test_parameters_are_guarded_too(tmp_path):
    """A ModelNew built with other constructor arguments has weights of other shapes: refused, not misread."""
    source = tiny("7_Linear_Residual_Tanh").read_text()
    init = Lowering.of(source).lower(Options()).source
    assert "_specialised_to('linear.weight', self.linear.weight, (32, 32)" in init


def test_the_judge_calls_an_expert_seed_specialised_with_its_guards_words(tmp_path):
    """A softmax over x @ x.T rows: the row length is the batch, its tile grows with it, so the seed stays
    specialised to it (tests/fixtures/expert/gram_softmax.py)."""
    from pipeline.judge.shapes import SPECIALISED
    from pipeline.types import Status
    from tests.expert.judging import CPU, Judge, judge_source, verdict_text
    from tests.expert.problems import FIXTURES

    problem = FIXTURES / "gram_softmax.py"
    lowering = Lowering.of(problem.read_text())
    assert "held in registers" in lowering.generalised(Options()).why
    import dataclasses

    with Judge(dataclasses.replace(CPU, other_shapes=True)) as judge:
        result = judge_source(judge, problem, lowering.lower(Options()).source, tmp_path, "gram_seed")
    assert result.status is Status.OK and result.generality == SPECIALISED, verdict_text(result)
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert "egg: this ModelNew is specialised to x of shape [16, 32]" in check.detail and "got shape [8, 32]" in check.detail
