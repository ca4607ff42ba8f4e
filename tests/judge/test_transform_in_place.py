"""A scaled or large set's inputs are changed in place where only the set holds them (no second copy of a 16 GB
input beside the candidate's timed sets: level1/45's re-verification ran out of GPU memory so), and copied where the
problem keeps them too, so a change never carries into a later draw."""

import pytest
import torch

from pipeline.judge import worker

CPU = torch.device("cpu")
KEPT = torch.rand(64)


def _draw(get_inputs, transform, **how):
    return worker.make_inputs(get_inputs, {"name": "t", "seed": 5, "transform": transform, **how}, CPU)[0]


@pytest.mark.parametrize(("transform", "how", "factor"), [("scaled", {"scale": 3.0}, 3.0), ("large", {"exponent": 14}, 2.0**14)])
def test_a_fresh_input_is_transformed_where_it_lies(transform, how, factor):
    made = []

    def get_inputs():
        x = torch.rand(64)
        made.append(x.data_ptr())
        return [x]

    out = _draw(get_inputs, transform, **how)
    torch.manual_seed(5)
    assert out.data_ptr() == made[0]
    assert torch.equal(out, torch.rand(64) * factor)


@pytest.mark.parametrize("get_inputs", [lambda: [KEPT], lambda: [KEPT.detach()], lambda: [KEPT[:32]]],
                         ids=["the module's own", "a detached alias", "a view"])
def test_an_input_the_problem_keeps_is_copied_and_never_changed(get_inputs):
    before = KEPT.clone()
    first = _draw(get_inputs, "scaled", scale=3.0)
    second = _draw(get_inputs, "scaled", scale=3.0)
    assert torch.equal(KEPT, before)
    assert torch.equal(first, second) and torch.equal(first, before[: first.numel()] * 3.0)
