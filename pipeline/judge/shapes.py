"""Inputs the judge was not shown: a drop-in ModelNew is right on every input the reference accepts, or refuses it
with one clear error. Never a wrong answer on the user's batch size.

The check is part of every check's draw, not a second check: the reference's first run (its facts, computed once
per problem and cached) probes which inputs of other shapes it runs on (pipeline.judge.resize: each distinct
leading size of the tensor inputs, set to 1, halved, odd, plus two, doubled, doubled plus one and quadrupled plus
three, for every input of that size or that input alone; the first two sizes of later dimensions, odd and doubled
plus one; a dimension of size 1 grown to 3; every later size cut at once; growth only while the inputs stay
small), and each check
then calls the candidate on those sets too, drawn afresh, after the problem's own trials and in the same worker
(so a candidate that keeps the first shape it saw is called with others). The reference computes its outputs for
them beside the candidate, as for any trial; a set it refuses with this check's draw is not owed. At the very end
(after the repeats and the audit call) every set the candidate refused is asked for once more, and three or four sets
are asked for again with fresh values, two at sizes drawn for the check (pipeline.judge.draw).

What the candidate does there decides:
- right on every one: `general`;
- a clean refusal (a plain Python exception raised by its code, raised every time it is asked, with the inputs
  left as they were, such as the expert backend's shape guard): `specialised to the problem's shapes`, with its error;
  refusals of other sizes of a dimension past the first or of views not contiguous only (a row length, a spatial
  size, a sliced input), right at every leading
  size: `general in the leading size`, with its error;
- a wrong answer, or an answer where it refused before: a failed check (status mismatch) that names the shapes; a
  crash, a hang, an error that is no clean refusal, inputs written: the failed run's own status.

Imports: the standard library, the judge's channel protocol and its own types.
"""

from __future__ import annotations

from typing import Any

from pipeline.judge.channel import ASKED_AGAIN
from pipeline.types import Check, TrialResult

GENERAL = "general"
SPECIALISED = "specialised to the problem's shapes"
LEADING = "general in the leading size"  # right at every leading size tried; refused other dimensions' sizes or layouts
UNCHECKED = "not checked"  # no input of another shape the reference runs on: said, never read as a pass
SIZE_WORDS = {"one": "1", "halved": "halved", "odd": "odd", "plus_two": "plus two", "doubled": "doubled",
              "doubled_plus_one": "doubled plus one", "large": "quadrupled plus three"}


def label(derived: dict[str, Any], transform: str = "", drawn: int | None = None) -> str:
    """How the verdict names one input set of another shape: 'leading size halved ([8, 64])', 'size of dimension 1
    of tensor input 1 odd, every dimension of that size ([32, 511])'; one asked again at the end at a size drawn
    for the check: 'leading size 27 (drawn at random, asked again at the end)'."""
    plan = derived["resize"]
    if plan.get("layout"):
        shapes = ", ".join(str(list(s)) for s in derived.get("shapes", []))
        values = f", {'outlier' if transform == 'outliers' else transform} values" if transform else ""
        how = {"offset": "contiguous views one element into their memory",
               "padded": "views whose rows are 3 elements longer in memory than they are (a slice of wider rows)",
               "transposed": "transposed views, dense with their last two dimensions swapped in memory"}.get(
            plan["layout"], "views that are not contiguous (stride 2 in the last dimension, one element in)")
        return f"the problem's sizes in {how}{values} ({shapes})"
    if plan.get("together"):
        shapes = ", ".join(str(list(s)) for s in derived.get("shapes", []))
        sizes = ", ".join(f"{n} to {new}" for _, _, n, new in plan["together"])
        values = f", {'outlier' if transform == 'outliers' else transform} values" if transform else ""
        which = "the leading and every later size" if plan["together"][0][1] == 0 else "every later size"
        return f"{which} at once ({sizes}), every dimension of each size{values} ({shapes})"
    if plan.get("dim"):
        what = f"size of dimension {plan['dim']} of tensor input {plan['anchor'] + 1}"
        alone = ", every dimension of that size" if plan["shared"] else ", that dimension only"
    else:
        what = "leading size" + ("" if plan["anchor"] == 0 else f" of tensor input {plan['anchor'] + 1}")
        alone = ("" if plan["shared"] else ", that input only") + ("" if plan.get("counts", True) else ", integer inputs kept")
    values = f", {'outlier' if transform == 'outliers' else transform} values" if transform else ""
    if drawn is not None:
        if not plan.get("tensors", True):
            return f"integer inputs set to {drawn} (drawn at random{values}, asked again at the end)"
        return f"{what} {drawn} (drawn at random{alone}{values}, asked again at the end)"
    if not plan.get("tensors", True):
        what, alone = "leading size", ", integer inputs only (the tensors as they were)"
    shapes = ", ".join(str(list(s)) for s in derived.get("shapes", []))
    return f"{what} {SIZE_WORDS.get(plan['size'], plan['size'])}{alone}{values} ({shapes})"


def _beyond_batch(derived: dict[str, Any]) -> bool:
    """A set that changes something other than a leading size: another dimension, or the layout."""
    return bool(derived["resize"].get("dim") or derived["resize"].get("layout"))


def judge_calls(draw, reference: dict[str, Any], results: dict[str, TrialResult], refused: dict[str, str],
                answered: frozenset[str] = frozenset(), not_owed: dict[str, str] | None = None,
                flaky: dict[str, str] | None = None) -> tuple[Check | None, str]:
    """The check on the calls with inputs of other shapes, and the generality it gives: None when this check did
    not ask for them (a search's candidate it would not keep). `answered`: the calls that returned (a set it refused
    and answered when asked again at the end is no guard: it said no, then gave an answer)."""
    not_owed = not_owed or {}  # sets the reference itself refused with this check's draw (it took their shapes with another)
    flaky = flaky or {}  # sets it answered only when called a second time: the first call's exception
    if not draw.other_shapes:
        return None, ""
    found = {d["name"]: d for d in reference.get("derived", [])}
    if not draw.derived:
        why = reference.get("derive_note") or ("the reference runs at no other leading size of its tensor inputs (tensors inside "
                                               "lists or tuples are not varied)")
        return Check("other_shapes", None, f"{UNCHECKED}: {why}"), UNCHECKED
    seen, declined, skipped, leading = [], [], [], 0
    for derived in draw.derived:
        name, source = derived["name"], derived.get("again", "")
        known = found.get(source or name, {"resize": derived["resize"]})
        drawn = derived["resize"]["new"] if source and derived["resize"]["new"] != known["resize"]["new"] else None
        what = label(known, derived.get("transform", ""), drawn)
        what += ", asked again at the end with fresh values" if source and drawn is None else ""
        if name in not_owed:
            skipped.append(f"{what} ({not_owed[name]})")
            continue
        if name in refused and draw.reference_name(name) == name and f"{name}{ASKED_AGAIN}" in answered:
            return Check("other_shapes", False, f"refused inputs of another shape, then answered them when asked again "
                                                f"(a guard refuses every time), {what}: {refused[name]}"), ""
        if source and drawn is None and source not in refused and name in refused and source not in not_owed:
            return Check("other_shapes", False, f"answered inputs of another shape, then refused the same shape with fresh values "
                                                f"at the end (a guard decides by shape, every time), {what}: {refused[name]}"), ""
        if name in flaky:
            return Check("other_shapes", False, f"raised on inputs of another shape, then answered the same inputs when called "
                                                f"again (a refusal is raised every time), {what}: {flaky[name]}"), ""
        if name in refused:
            declined.append((f"{what}: {refused[name]}", _beyond_batch(derived)))
        elif name not in results:
            return Check("other_shapes", False, f"no outputs on inputs of another shape, {what}"), ""
        elif not results[name].passed:
            return Check("other_shapes", False, f"wrong on inputs of another shape, {what}: {results[name].detail}"), ""
        else:
            seen.append(what)
            leading += not _beyond_batch(derived)
    note = f"; {reference['derive_note']}" if reference.get("derive_note") else ""
    if skipped:
        note += "; not owed, the reference refused this check's draw of: " + "; ".join(skipped)
    if not seen and not declined:
        return Check("other_shapes", None, f"{UNCHECKED}: the reference refused every input of another shape drawn for this check{note}"), UNCHECKED
    if declined:
        right = f"; right on {', '.join(seen)}" if seen else ""
        # refusing only other sizes of a later dimension, while right at every leading size it met, is general in the batch
        kind = LEADING if all(other for _, other in declined) and leading else SPECIALISED
        return Check("other_shapes", True, f"{kind}: it refused " + "; ".join(d for d, _ in declined) + right + note), kind
    return Check("other_shapes", True, f"{GENERAL}: right on " + ", ".join(seen) + note), GENERAL
