"""A set of another shape asked for again at a drawn size stays within its plan's growth limit, however its
outputs grow (level3/8 on the GPU: a ResNet block's image grown in both spatial sizes handed over 1.27 GB of outputs
past a limit of 1 GiB, and the judge ended the reference's worker: an infra error of egg's own)."""

import math

import torch

from pipeline.judge import resize


def _sizes(shape, n, m):
    """The bytes of a float32 tensor of `shape` with every dimension of size n set to m."""
    return 4 * math.prod(m if s == n else s for s in shape)


def test_an_image_grown_in_both_sizes_is_capped_so_its_outputs_fit():
    x = torch.empty(2, 3, 224, 224)
    out_shape = (2, 64, 224, 224)  # a convolution's output, spatial sizes kept
    plan = next(p for p in resize.plans([x], _sizes(out_shape, 0, 0)) if p["name"] == "shape_dim2_doubled_plus_one_0")
    n, new = plan["nominal"], plan["new"]
    before = [_sizes(x.shape, n, n), _sizes(out_shape, n, n)]
    after = [_sizes(x.shape, n, new), _sizes(out_shape, n, new)]
    most = resize.most_within(plan, before, after)
    assert new <= most <= plan["most"]
    # at the capped size the whole fits the limit; at the plan's own estimate it did not
    assert _sizes(x.shape, n, most) + _sizes(out_shape, n, most) <= plan["bytes"]
    assert _sizes(x.shape, n, plan["most"]) + _sizes(out_shape, n, plan["most"]) > plan["bytes"]


def test_a_batch_that_grows_its_outputs_linearly_keeps_its_size():
    x = torch.empty(64, 128)
    plan = next(p for p in resize.plans([x], x.numel() * 4) if p["name"] == "shape_doubled_plus_one_0")
    n, new = plan["nominal"], plan["new"]
    before, after = [x.numel() * 4] * 2, [new * 128 * 4] * 2
    assert resize.most_within(plan, before, after) == plan["most"]


def test_tensors_that_do_not_pair_up_take_a_cubic_growth():
    plan = {"nominal": 100, "new": 201, "most": 1615, "bytes": 1 << 30}
    most = resize.most_within(plan, [1 << 20], [1 << 22, 1 << 22])
    assert 201 <= most < 1615 and (1 << 23) * (most / 201) ** 3 <= 1 << 30
    assert (1 << 23) * (1615 / 201) ** 3 > 1 << 30  # where the plan's own `most` would have taken it


def test_a_plan_below_the_problems_size_has_no_most_to_cut():
    plan = {"nominal": 100, "new": 50}
    assert resize.most_within(plan, [4], [2]) == 50
