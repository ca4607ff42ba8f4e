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


@pytest.mark.parametrize("shape,dtype,transpose", [((16, 100), torch.float32, False), ((16, 64), torch.float64, False),
                                                    ((64, 16), torch.float32, True), ((8, 100), torch.float32, False)])
def test_another_shape_stride_or_dtype_is_refused_in_one_line(tmp_path, shape, dtype, transpose):
    model = model_new("23_Softmax", tmp_path)
    x = torch.randn(*shape, dtype=dtype)
    x = x.t() if transpose else x  # (16, 64) with strides (1, 16): the kernel reads rows of 64 packed values
    with pytest.raises(ValueError) as refused:
        model(x)
    message = str(refused.value)
    assert "\n" not in message and f"specialised to x of shape [{x.shape[0]}, 64], strides [64, 1], torch.float32" in message
    assert f"got shape {list(x.shape)}" in message


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
