"""A hidden trial's or timed trial's inputs are transformed in place where only the set holds them (no second copy
of a 16 GB input: level1/45's re-verification ran out of GPU memory beside the candidate's copies), with the values
the copying path gives, and copied where the problem keeps them too, so a change never carries into a later draw."""

import pytest
import torch

from pipeline.judge import worker

CPU = torch.device("cpu")
KEPT = torch.rand(16, 64, generator=torch.Generator().manual_seed(0))  # about 10 outliers drawn
TRANSFORMS = {"scaled": {"scale": 3.0}, "large": {"exponent": 14}, "signed": {}, "outliers": {}, "ties": {}}


def _draw(get_inputs, transform):
    return worker.make_inputs(get_inputs, {"name": "t", "seed": 5, "transform": transform, **TRANSFORMS[transform]}, CPU)[0]


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_fresh_input_is_transformed_where_it_lies_to_the_same_values(transform):
    made = []

    def fresh():
        x = KEPT.clone()
        made.append(x.data_ptr())
        return [x]

    out = _draw(fresh, transform)
    assert out.data_ptr() == made[0]
    copied = _draw(lambda: [KEPT], transform)  # the problem keeps its tensor: the copying path
    assert copied.data_ptr() != KEPT.data_ptr()
    assert torch.equal(out, copied) and not torch.equal(out, KEPT)


@pytest.mark.parametrize("get_inputs", [lambda: [KEPT], lambda: [KEPT.detach()], lambda: [KEPT[:2]], lambda: [KEPT.t()]],
                         ids=["the module's own", "a detached alias", "a view", "a transposed view"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_an_input_the_problem_keeps_is_copied_and_never_changed(get_inputs, transform):
    before = KEPT.clone()
    first, second = _draw(get_inputs, transform), _draw(get_inputs, transform)
    assert torch.equal(KEPT, before)
    assert torch.equal(first, second)


def test_a_keyed_fingerprint_stands_for_a_copy_the_gpu_has_no_room_for():
    """A GiB input beside a full card is fingerprinted, not copied to the host: a write, a swap of two elements and
    a write of the same value's other bits are each seen; an untouched input is not."""
    x = torch.rand(1000, generator=torch.Generator().manual_seed(1))
    key = 123456789
    for change in (lambda t: t.__setitem__(7, t[7] + 1), lambda t: t.__setitem__([3, 4], t[[4, 3]]),
                   lambda t: t.__setitem__(9, -0.0 if t[9] == 0 else t[9].neg().neg() * 1.0000001)):
        y = x.clone()
        before, placed = [worker._Marked(y, key)], worker.where([y])
        assert worker.written(before, placed, [y]) == []
        change(y)
        assert worker.written(before, placed, [y]) == [0]
