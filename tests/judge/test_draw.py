"""The draw of one check's sets of other shapes (pipeline.judge.draw): which take outlier or signed values is
drawn for each check, never fixed by position (a kernel exact only at the sizes that see the problem's draws was
not caught: red team 4's a5), with each kind at least once, and which kinds reach another shape drawn too where
there are fewer sets than kinds (red team 6's a05); three are asked for again at the end: the first at its source's
size, the second at a size drawn for the check that no other set has (red team 3's a04 and a05 knew the sizes the
judge tries), the third at another set's own size, a size seen before (red team 6's a04 went bad only there); a
fourth, where a later dimension has a set above the problem's, at a size of that dimension drawn for the check."""

from __future__ import annotations

from collections import Counter

from pipeline.judge.draw import AGAIN, Draw
from pipeline.types import EvalOptions

OPTIONS = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)
DERIVED = tuple({"name": f"shape_{k}_0", "resize": {"size": k, "anchor": 0, "nominal": 16, "new": n, "shared": True}}
                for k, n in (("halved", 8), ("odd", 15), ("one", 1), ("plus_two", 18), ("doubled", 32)))


def kinds(draw: Draw) -> list[str]:
    return [s.get("transform", "") for s in draw.derived if not s.get("again")]


def test_every_set_takes_each_kind_of_values_in_some_check_and_every_check_takes_each_kind():
    seen = {s["name"]: Counter() for s in DERIVED}
    for _ in range(300):
        draw = Draw.new(OPTIONS, ("signed", "scaled", "outliers"), 0, DERIVED, True)
        assert set(kinds(draw)) == {"", "outliers", "signed", "scaled"}
        for s in draw.derived:
            if not s.get("again"):
                seen[s["name"]][s.get("transform", "")] += 1
    # 300 checks: a position that never sees a kind would be a pattern, not a draw (each kind's chance is about 1/4)
    largest = max(DERIVED, key=lambda d: d["resize"]["new"])["name"]  # always outliers: a set of one row may hold none
    assert set(seen.pop(largest)) == {"outliers"}
    assert all(set(counts) == {"", "outliers", "signed", "scaled"} for counts in seen.values()), seen
    assert all("scale" in s for s in draw.derived if s.get("transform") == "scaled")


def test_values_the_reference_cannot_take_are_never_drawn():
    for _ in range(50):
        assert set(kinds(Draw.new(OPTIONS, ("scaled",), 0, DERIVED, True))) == {"", "scaled"}
        assert set(kinds(Draw.new(OPTIONS, (), 0, DERIVED, True))) == {""}


def test_with_fewer_sets_than_kinds_which_kinds_reach_another_shape_is_drawn():
    seen = Counter()
    for _ in range(200):  # two sets, four kinds: each kind's chance is about 1/2 a check
        seen.update(kinds(Draw.new(OPTIONS, ("signed", "scaled", "outliers"), 0, DERIVED[:2], True)))
    assert set(seen) == {"", "outliers", "signed", "scaled"}, seen


def test_four_sets_are_asked_again_drawn_afresh_at_their_own_a_new_a_seen_and_a_new_lower_size():
    tried = {s["resize"]["new"] for s in DERIVED}
    drawn, thirds, lower = set(), Counter(), set()
    for _ in range(200):
        draw = Draw.new(OPTIONS, ("signed", "outliers"), 0, DERIVED, True)
        again = [s for s in draw.derived if s.get("again")]
        # the sixth draws a batch below the problem's (red team 13's c02); a fourth and fifth only for later dimensions
        assert len(again) == AGAIN - 2 == 4 and len({s["again"] for s in again}) == 4
        sources = {s["name"]: s for s in draw.derived}
        for s in again:
            source = sources[s["again"]]
            assert s["name"] == f"{source['name']}_again" and s["seed"] != source["seed"]
            new, plan = s["resize"]["new"], source["resize"]
            assert {**s["resize"], "new": plan["new"]} == plan
            if s is again[3]:  # a size below the problem's that no set has
                assert 1 <= new < 16 and new not in tried and plan["new"] < 16
                lower.add(new)
                continue
            if s is not again[1]:  # the first and third at their sources' own sizes, fresh values
                assert new == plan["new"]
                if s is again[2]:  # below the problem's where a set is (cheaper): another set's size, seen before
                    assert new < 16 and new != again[0]["resize"]["new"]
                    thirds[new] += 1
                continue
            assert new not in tried
            # on the source's side of the problem's 16 rows, never above a size the reference's first run took
            assert 1 <= new < 16 if plan["new"] < 16 else 16 < new <= plan["new"]
            assert draw.source_name(s["name"]) == source["name"] and draw.reference_name(s["name"]) == s["name"]
            drawn.add(new)
    assert len(drawn) > 8, drawn  # sizes drawn, not a pattern
    assert len(thirds) == 3, thirds  # each set below the problem's size in some check
    assert len(lower) > 8, lower  # batches below, drawn
    # every set it may refuse is asked once more under a name of its own, compared with nothing of the reference's
    assert set(draw.asked_again) == {f"{s['name']}_asked_again" for s in DERIVED}
    assert draw.reference_name("shape_odd_0_asked_again") == "shape_odd_0"


def test_the_audit_call_after_other_shapes_takes_outlier_values_where_the_reference_can():
    """The last call, at the problem's size: a kernel that another shape spoiled only where values are large (red team
    6's a06: no max subtraction after any other shape) meets outliers there; with no other shape, or no outliers the
    reference takes, it is the problem's own draw."""
    assert Draw.new(OPTIONS, ("signed", "scaled", "outliers"), 0, DERIVED, True).audit.get("transform") == "outliers"
    assert "transform" not in Draw.new(OPTIONS, ("signed", "scaled"), 0, DERIVED, True).audit
    assert "transform" not in Draw.new(OPTIONS, ("signed", "scaled", "outliers"), 0, (), False).audit


def test_the_drawn_size_is_above_the_problems_where_a_set_is_and_reaches_past_four_times_it():
    """The second set asked again takes a set above the problem's size where there is one, at a size drawn up to its
    plan's `most` (16n + 15 as growth allows): a grid capped just above 4n + 3, the largest planned size, is met in
    about half the checks (a held-out red team's 03_rows_capped, tests/fixtures/referee_hold_shapes_attacks). The
    first and the third come from the leading sizes where any, so a kernel that refuses later dimensions in the
    phase still meets, at the end, a leading size it answered (red team 6's a12)."""
    derived = tuple({**d, "resize": {**d["resize"], "most": 271}} if d["resize"]["new"] > 16 else d for d in DERIVED)
    derived += ({"name": "shape_dim1_odd_0", "resize": {"size": "odd", "anchor": 0, "dim": 1, "nominal": 64, "new": 63, "shared": True}},)
    drawn = []
    for _ in range(200):
        draw = Draw.new(OPTIONS, ("signed", "outliers"), 0, derived, True)
        first, second, third, *later = [s for s in draw.derived if s.get("again")]
        assert [s["again"] for s in later][0] == "shape_dim1_odd_0"  # the fifth: the later dimension's set below
        assert not later[1]["resize"].get("dim") and later[1]["resize"]["new"] < 16  # the sixth: a batch below
        assert not first["resize"].get("dim") and not third["resize"].get("dim")
        assert 16 < second["resize"]["new"] <= 271 and not second["resize"].get("dim")
        drawn.append(second["resize"]["new"])
    assert max(drawn) > 4 * 16 + 3 and min(drawn) <= 4 * 16 + 3  # both sides of the largest planned size, in 200 draws


def test_the_drawn_size_is_a_leading_one_where_the_problem_has_leading_sets_and_a_later_one_is_drawn_fourth():
    """With a later dimension's set above the problem's too, the size drawn afresh second is still a batch (red team 3's
    a04, right only at the batch sizes the judge plans, passed once the drawn set was a row length), and a fourth set
    draws a size of that later dimension up to its plan's `most` (red team 12's 03_block_cap sized its row block for
    2n + 1, the largest later size planned, and passed while later sizes were only ever the planned ones)."""
    derived = DERIVED + ({"name": "shape_dim1_doubled_plus_one_0", "resize": {"size": "doubled_plus_one", "anchor": 0, "dim": 1,
                                                                             "nominal": 64, "new": 129, "most": 1039, "shared": True}},)
    fourth = []
    for _ in range(200):
        again = [s for s in Draw.new(OPTIONS, ("signed",), 0, derived, True).derived if s.get("again")]
        assert len(again) == AGAIN - 1 and not any(s["resize"].get("dim") for s in again[:3]), again  # no later set below
        assert again[3]["again"] == "shape_dim1_doubled_plus_one_0" and 64 < again[3]["resize"]["new"] <= 1039
        fourth.append(again[3]["resize"]["new"])
    assert max(fourth) > 4 * 64 + 3 and len(set(fourth)) > 20  # past a block sized for 2n + 1, at sizes drawn


def test_a_fifth_set_draws_a_later_size_below_the_problems():
    """Where a later dimension has a set below the problem's, a fifth set asked again draws its size from 2 to n - 1
    (red team 13's c01 was wrong only at even row lengths below the problem's; the planned one is odd)."""
    derived = DERIVED + ({"name": "shape_dim1_odd_0", "resize": {"size": "odd", "anchor": 0, "dim": 1, "nominal": 64,
                                                                 "new": 63, "shared": True}},)
    fifth = []
    for _ in range(200):
        again = [s for s in Draw.new(OPTIONS, ("signed",), 0, derived, True).derived if s.get("again")]
        assert len(again) == AGAIN - 1 and again[3]["again"] == "shape_dim1_odd_0"
        fifth.append(again[3]["resize"]["new"])
    assert min(fifth) >= 2 and max(fifth) <= 62 and any(n % 2 == 0 for n in fifth) and len(set(fifth)) > 20


def test_the_together_and_layout_sets_are_never_asked_again():
    """The set that cuts every later size at once has no single size to draw, and the set of views not contiguous
    has the problem's sizes: neither is asked again, even where it is the only set."""
    together = {"name": "shape_dims_together", "resize": {"size": "odd", "anchor": 0, "dim": 1, "nominal": 8, "new": 7,
                                                          "shared": True, "together": [[0, 1, 8, 7], [0, 2, 6, 5]]}}
    layout = {"name": "shape_strided", "resize": {"size": "strided", "anchor": 0, "nominal": 16, "new": 16, "shared": True,
                                                   "layout": "strided"}}
    for derived in (DERIVED + (together, layout), (together,), (layout,)):
        for _ in range(50):
            again = [s for s in Draw.new(OPTIONS, ("signed",), 0, derived, True).derived if s.get("again")]
            assert all(s["again"] not in ("shape_dims_together", "shape_strided") for s in again)


def test_the_largest_batch_takes_outlier_values_even_beside_a_longer_row():
    """A later dimension's size is no batch: with a row length of 129 beside batches up to 32, the largest batch
    still takes outliers in every check (red team 3's a17 dropped the max subtraction only off the problem's batch,
    and passed the checks where the outliers went to the row length)."""
    derived = DERIVED + ({"name": "shape_dim1_doubled_plus_one_0", "resize": {"size": "doubled_plus_one", "anchor": 0, "dim": 1,
                                                                             "nominal": 64, "new": 129, "most": 1039, "shared": True}},)
    for _ in range(100):
        draw = Draw.new(OPTIONS, ("signed", "scaled", "outliers"), 0, derived, True)
        assert next(s for s in draw.derived if s["name"] == "shape_doubled_0").get("transform") == "outliers"
