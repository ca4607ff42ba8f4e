"""Red team 12's later-dimension attacks (session 25, a helper that had not seen our fixtures, on 34d3392;
tests/fixtures/dims_attacks has each attempt and README.md the table), closed in session 26: a third later size
never varied (01) and a kernel wrong only where two later sizes both change (04) meet the set that cuts the leading
and every later size at once; a size-1 dimension read as if it stayed 1 (02) meets it grown to 3. 03 (a row block sized for 2n + 1
at the first call) meets a later size drawn up to 16n + 15 in about half the checks, so no test asserts its
verdict; tests/judge/test_draw.py asserts the draw. CPU, the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.judge import Judge, resize
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ATTACKS = Path(__file__).resolve().parents[1] / "fixtures" / "dims_attacks"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", correctness_trials=2)) as judge:
        yield judge


@pytest.mark.parametrize("candidate, problem, says", [
    ("01_third_dim_literal.py", "prob_3d_softmax.py", "the leading and every later size at once (4 to 3, 8 to 7, 6 to 5, 10 to 9)"),
    ("02_unit_dim_ignored.py", "prob_unit_dim.py", "size of dimension 1 of tensor input 1 doubled plus one"),
    ("04_both_dims_change.py", "prob_3d_softmax.py", "the leading and every later size at once (4 to 3, 8 to 7, 6 to 5, 10 to 9)"),
])
def test_a_kernel_wrong_at_a_later_size_fails_other_shapes(judge, candidate, problem, says):
    result = judge.evaluate(load_problem(ATTACKS / problem), load_candidate(ATTACKS / candidate))
    assert result.status is Status.MISMATCH, result.reason
    check = next(c for c in result.checks if c.name == "other_shapes")
    assert check.passed is False and "wrong on inputs of another shape" in check.detail and says in check.detail, check.detail


def test_every_size_is_cut_at_once_in_one_set_and_the_later_ones_alone_where_the_reference_refuses_that():
    x, w = torch.rand(4, 8, 6, 10), torch.rand(10, 6)
    plans = resize.plans([x, w], output_bytes=x.numel() * 4)
    together = [p for p in plans if p.get("together")]
    assert [p["name"] for p in together] == ["shape_all_together", "shape_dims_together"]
    assert {p["group"] for p in together} == {"dims_together"}  # the first the reference runs on is kept
    assert [t[2:] for t in together[0]["together"]] == [[4, 3], [8, 7], [6, 5], [10, 9]]
    assert [t[2:] for t in together[1]["together"]] == [[8, 7], [6, 5], [10, 9]]
    draws = [torch.rand(4, 8, 6, 10), torch.rand(10, 6)]
    derived = resize.resize([x, w], together[1], lambda: draws)
    assert [tuple(t.shape) for t in derived] == [(4, 7, 5, 9), (9, 5)]  # every dimension of each size, at once
    assert torch.equal(derived[0], x[:, :7, :5, :9]) and torch.equal(derived[1], w[:9, :5])  # the same draws, cut
    assert [tuple(t.shape) for t in resize.resize([x, w], together[0], lambda: draws)] == [(3, 7, 5, 9), (9, 5)]
    # one later size: the batch and the row together (red team 13's c04), no set of the later sizes alone
    assert [p["name"] for p in resize.plans([torch.rand(16, 64)], 0) if p.get("together")] == ["shape_all_together"]


def test_a_dimension_of_size_one_is_grown_with_further_draws():
    x = torch.rand(16, 1, 12)
    plans = [p for p in resize.plans([x], 16 * 12 * 4) if p.get("dim") == 1]
    assert {(p["size"], p["new"]) for p in plans} == {("doubled_plus_one", 3)}
    more = [torch.rand(16, 1, 12), torch.rand(16, 1, 12)]
    draws = iter([[t] for t in more])
    grown = resize.resize([x], plans[0], lambda: next(draws))[0]
    assert tuple(grown.shape) == (16, 3, 12) and torch.equal(grown, torch.cat([x, *more], 1))


def test_each_place_of_a_later_size_met_twice_is_a_set_of_one_family_and_a_check_draws_one():
    """A square GEMM's 32 is A's K, B's K and B's N: each alone is a set of one family (red team 13's c13 took B's
    row stride as K, and c17 changed W only with H), the reference keeps those it runs on, and a check draws one."""
    from pipeline.judge.draw import Draw
    from pipeline.types import EvalOptions as Options
    a, b = torch.rand(8, 8), torch.rand(8, 8)
    family = [p for p in resize.plans([a, b], 8 * 8 * 4) if p.get("family")]
    assert [(p["anchor"], p["dim"], p["new"], p["shared"]) for p in family] == [(0, 1, 7, False), (1, 0, 7, False), (1, 1, 7, False)]
    derived = tuple({"name": p["name"], "resize": p} for p in family)
    chosen = set()
    for _ in range(60):
        drawn = [s["name"] for s in Draw.new(Options(device="cpu"), (), 0, derived, True).derived if not s.get("again")]
        assert len(drawn) == 1
        chosen.add(drawn[0])
    assert chosen == {p["name"] for p in family}


def test_the_layout_set_holds_the_same_values_in_a_view_not_contiguous_or_one_element_in():
    x, w, scalar = torch.rand(4, 6), torch.rand(6), torch.tensor(2.0)
    assert [p["layout"] for p in resize.plans([x, w, scalar], 4 * 6 * 4) if p.get("layout")] == ["strided", "offset", "padded", "transposed"]
    strided = resize.strided([x, w, scalar, 3], "strided")
    assert [t.stride() for t in strided[:2]] == [(13, 2), (2,)] and all(t.storage_offset() == 1 for t in strided[:2])
    offset = resize.strided([x, w, scalar, 3], "offset")
    assert offset[0].is_contiguous() and offset[0].storage_offset() == 1
    padded = resize.strided([x, w, scalar, 3], "padded")
    assert padded[0].stride() == (9, 1) and padded[1].is_contiguous() and padded[1].storage_offset() == 1  # 1-D: as offset
    for made in (strided, offset, padded):
        assert torch.equal(made[0], x) and torch.equal(made[1], w) and made[2] is scalar and made[3] == 3
    assert not [p for p in resize.plans([torch.empty(1 << 31, device="meta")], 0) if p.get("layout")]  # 8 GiB: no room for two
