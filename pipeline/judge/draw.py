"""The draw: every input of one check, from the operating system's randomness, unknown to the candidate.

A check's calls: the trials (nominal inputs), the hidden trials (signed; scaled by a random factor; the first trial's
with a few elements of magnitude 50 to 1000, so a kernel right only for small values fails; on a grid, with ties; scaled
by 2**13 to 2**24), the inputs of other shapes
the reference runs on (its draws at another leading size: pipeline.judge.shapes; each takes the problem's draws,
outlier, signed or scaled values, drawn here), repeats of the first trial, three to six of the sets of other shapes again with fresh values,
an audit call on inputs of its own (with outlier values after other shapes), and on a GPU the timed trials. The timed trials rotate
through a few timed input sets loaded into fixed buffers, and every trial's floating inputs are also scaled by a
factor of its own near 1, so no two trials see the same contents (a cache keyed on the inputs' values never hits);
a few trials, chosen here and revealed only once each has returned, have their outputs compared with the
reference's for exactly those inputs. Outputs of extra calls (repeats, audit, the verified timed trials) are
compared on a strided subsample whose offset is drawn here too.

Imports: the standard library and the judge's channel protocol (its call names).
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field
from typing import Any

from pipeline.judge.channel import ASKED_AGAIN

HIDDEN_TRIALS = ("signed", "scaled", "outliers", "ties", "large")
SCALE_RANGE = (2.0, 8.0)  # the scaled trial multiplies floating inputs by a factor drawn from this range
# the large trial multiplies them by 2**k, k drawn from this range (8,192 to 16.8 million): exact in binary floating
# point (the problem's draws and their roundings, only larger), past any value another trial draws (outliers reach
# 1000; red team 19 clamped a max at 4096 and passed). The reference's first run takes the largest, so a problem whose
# reference overflows there skips the trial on every check. float16 inputs take at most 2**12 (worker.LARGE_CAP)
LARGE_EXPONENTS = (13, 24)
TRIAL_SCALE_RANGE = (0.9, 1.1)  # every timed trial's factor
VERIFIED_TRIALS = 5  # timed trials whose outputs are compared
AGAIN = 6  # sets of other shapes asked for a second time at the end of the calls, drawn afresh (at most)


def _transform(kind: str, *, largest: bool = False) -> dict[str, Any]:
    if kind == "scaled":
        return {"transform": kind, "scale": _uniform(*SCALE_RANGE)}
    if kind == "large":
        low, high = LARGE_EXPONENTS
        return {"transform": kind, "exponent": high if largest else low + secrets.randbelow(high - low + 1)}
    return {"transform": kind} if kind else {}


def _seed() -> int:
    return secrets.randbelow(2**31 - 2) + 1


def _uniform(low: float, high: float) -> float:
    return round(low + (high - low) * secrets.randbelow(10**6) / 10**6, 6)


def _offset() -> int:
    return secrets.randbelow(2**62)


def _kinds(kinds: list[str], count: int) -> list[str]:
    """`count` values kinds, each drawn at random, with every kind at some random place where count allows."""
    chosen = [secrets.choice(kinds) for _ in range(count)]
    places = secrets.SystemRandom().sample(range(count), min(count, len(kinds)))
    # the kinds in a drawn order too: with fewer places than kinds, which kinds get one is drawn, not the first ones
    for kind, place in zip(secrets.SystemRandom().sample(kinds, len(kinds)), places):
        chosen[place] = kind
    return chosen


def _other_size(plan: dict[str, Any], used: set[tuple[int, int, int]]) -> int:
    """A size on the same side of the problem's as the plan's (below it: 1 to n-1; above: n+1 to the plan's `most`, up
    to 16n + 15 as the growth limit allows, drawn log-uniformly: a grid capped just above the largest planned size
    is met half the time), at random, none of the sizes in `used` where any is left; else the plan's."""
    n, new, key = int(plan["nominal"]), int(plan["new"]), (plan["anchor"], plan.get("dim", 0))
    low, high = (2 if plan.get("dim") else 1, n - 1) if new < n else (n + 1, int(plan.get("most", new)))
    if high - low + 1 <= sum(1 for a, d, k in used if (a, d) == key and low <= k <= high):
        return new
    while True:
        if new < n:
            size = low + secrets.randbelow(high - low + 1)
        else:  # log-uniform: as likely between n and 4n as between 4n and 16n
            size = min(high, int(low * (high / low) ** (secrets.randbelow(10**6) / 10**6)))
        if (*key, size) not in used:
            return size


def _one_of_each_family(derived: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """The sets of other shapes less all but one of each family (pipeline.judge.resize: each place of a later size
    alone), that one drawn for this check: a kernel wrong at one place only meets it in some checks, at the cost of one set."""
    families: dict[str, list[int]] = {}
    for k, d in enumerate(derived):
        if family := d["resize"].get("family"):
            families.setdefault(family, []).append(k)
    dropped = {k for ks in families.values() for k in ks} - {secrets.choice(ks) for ks in families.values()}
    return tuple(d for k, d in enumerate(derived) if k not in dropped)


@dataclass(frozen=True)
class Draw:
    """The inputs of one check (see the module's docstring). `offsets` holds the subsample offset of every extra
    call; `scales` one factor per timed trial; `verified` the timed trials compared, by index."""

    trials: tuple[dict[str, Any], ...]
    hidden: tuple[dict[str, Any], ...]
    audit: dict[str, Any]
    timed_sets: tuple[dict[str, Any], ...]
    scales: tuple[float, ...]
    offsets: dict[str, int]
    limit: int  # outputs with more elements than this are subsampled in extra calls
    verified: tuple[int, ...] = field(default=())
    derived: tuple[dict[str, Any], ...] = field(default=())  # inputs of other shapes (pipeline.judge.shapes)
    other_shapes: bool = False  # whether this check asked for them (none derived then says: not checked)

    @classmethod
    def new(cls, options, hidden: tuple[str, ...], timed_count: int, derived: tuple[dict[str, Any], ...] = (),
            other_shapes: bool = False, *, first_run: bool = False) -> Draw:
        """`first_run`: the reference's first run, which finds the hidden trials it can take (at their largest values)."""
        derived = _one_of_each_family(derived)
        trials = tuple({"name": f"trial_{i + 1}", "seed": _seed()} for i in range(options.correctness_trials))
        # the outliers trial takes the first trial's draws: its inputs then differ from that trial's only in about 1% of
        # the elements, never the first or last (worker._with_outliers), and a kernel that replays an answer it keyed
        # on a few of its inputs' values (the first, the last, the count) hands back the first trial's (red team 19's c)
        made = [{"name": kind, "seed": trials[0]["seed"] if kind == "outliers" and trials else _seed(),
                 **_transform(kind, largest=first_run)} for kind in hidden]
        timed_sets = tuple({"name": f"timed_set_{k}", "seed": _seed()} for k in range(timed_count))
        trial_count = options.timing_trials if timed_count else 0
        scales = tuple(_uniform(*TRIAL_SCALE_RANGE) for _ in range(trial_count))
        verified = tuple(sorted(secrets.SystemRandom().sample(range(trial_count), min(VERIFIED_TRIALS, trial_count))))
        extra = [f"repeat_{k + 1}" for k in range(options.repeat_calls)] + ["audit"] + [f"timed_{i}" for i in verified]
        offsets = {name: _offset() for name in extra}
        # a set of another shape takes the problem's draws or a hidden trial's values (outliers, signed, scaled) where the
        # reference can, drawn here for each set (a kernel exact only for the problem's draws at some sizes, or only
        # for the values at the positions of the last check, is not exact there either)
        # (ties too, where the reference returns integers: a tie broken wrong only off the problem's shape, red team 18's c1)
        kinds = ["", *(k for k in ("outliers", "signed", "scaled", "ties", "large") if k in hidden)]
        drawn = _kinds(kinds, len(derived))
        if "outliers" in kinds and len(derived) > len(kinds):  # the largest always: a set of one row may hold none
            # the largest batch, where a leading set is (a row length's size is no batch's: with it, a kernel that
            # drops the max subtraction only off the problem's batch met outliers in about nine checks of ten)
            batches = [i for i, d in enumerate(derived) if not d["resize"].get("dim") and not d["resize"].get("layout")]
            largest = max(batches or range(len(derived)), key=lambda i: derived[i]["resize"]["new"])
            drawn = _kinds(kinds, len(derived) - 1)
            drawn.insert(largest, "outliers")
        shaped = [{"name": d["name"], "seed": _seed(), "resize": d["resize"], **_transform(kind)} for d, kind in zip(derived, drawn)]
        # and AGAIN of them are asked for once more near the end (pipeline.judge.worker.ask_again), drawn afresh: the
        # first at its source's own size (a kernel that keeps its first answer at a size is asked there again), the
        # second at a size of its side of the problem's that no other set has (sizes known ahead can be
        # special-cased; above the problem's where a set is, up to 16n + 15, so a grid capped past the largest size
        # planned is met), the third at another set's own size, a size seen before, after the first came back to one
        # (a kernel whose state goes bad once a size is seen twice is met there), below the problem's where one is
        # (cheaper). Their values are drawn afresh too: with few sets, some kind would otherwise never meet another shape.
        used = {(d["resize"]["anchor"], d["resize"].get("dim", 0), d["resize"]["new"]) for d in derived}
        pick = secrets.SystemRandom()
        # all three among the leading sizes where any (a kernel that answered them and refuses them at the end is met
        # whatever it did with another dimension, and the drawn one is a batch no set had); the second, drawn, above
        # the problem's where one is
        single = [s for s in shaped if not s["resize"].get("together") and not s["resize"].get("layout")]
        leading = [s for s in single if not s["resize"].get("dim")] or single
        again = pick.sample(leading, min(1, len(leading)))
        others = [s for s in leading if s not in again] or [s for s in single if s not in again]
        if again and others:
            again.append(pick.choice([s for s in others if s["resize"]["new"] > s["resize"]["nominal"]] or others))
        if len(again) == 2 and (left := [s for s in leading if s not in again] or [s for s in single if s not in again]):
            below = [s for s in left if s["resize"]["new"] < s["resize"]["nominal"]]
            again.append(pick.choice(below or left))
        drawn_at = {1}
        # and a fourth, drawn too, from a later dimension's set above the problem's where the leading sizes gave the
        # second: a row length or spatial size up to 16n + 15 (a row block sized for the largest size planned is met)
        above = [s for s in single if s["resize"].get("dim") and s["resize"]["new"] > s["resize"]["nominal"] and s not in again]
        if above and len(again) == 3 and not again[1]["resize"].get("dim"):
            drawn_at.add(len(again))
            again.append(pick.choice(above))
        # and a fifth from a later dimension's set below it, at a size from 2 to n - 1 drawn so (an even row length
        # below the problem's, where the planned one is odd)
        below = [s for s in single if s["resize"].get("dim") and s["resize"]["new"] < s["resize"]["nominal"] and s not in again]
        if below and len(again) >= 3 and not again[1]["resize"].get("dim"):
            drawn_at.add(len(again))
            again.append(pick.choice(below))
        # and a sixth from a leading size's set below it, at a size from 1 to n - 1 drawn so (a batch of 5 where the
        # sets below are halved, odd and 1: red team 13's c02)
        lower = [s for s in leading if not s["resize"].get("dim") and s["resize"]["new"] < s["resize"]["nominal"] and s not in again]
        if lower and len(again) >= 3:
            drawn_at.add(len(again))
            again.append(pick.choice(lower))
        shaped += [{"name": f"{s['name']}_again", "seed": _seed(), "again": s["name"], **_transform(secrets.choice(kinds)),
                    "resize": {**s["resize"], "new": _other_size(s["resize"], used) if k in drawn_at else s["resize"]["new"]}}
                   for k, s in enumerate(again)]
        # the audit call comes last, at the problem's size: after the other shapes, with outlier values where the
        # reference takes them (a kernel that another shape spoiled only where values are large is met there)
        audit = {"name": "audit", "seed": _seed(), **({"transform": "outliers"} if derived and "outliers" in kinds else {})}
        return cls(trials, tuple(made), audit, timed_sets, scales, offsets,
                   options.subsample_above, verified, tuple(shaped), other_shapes)

    def sample(self, call: str) -> dict[str, int] | None:
        """The subsample of an extra call's outputs; None for a timed trial that is not compared."""
        if call not in self.offsets:
            return None
        return {"min_numel": self.limit, "elements": self.limit, "offset": self.offsets[call]}

    def is_timed_trial(self, call: str) -> bool:
        name, _, index = call.rpartition("_")
        return name == "timed" and index.isdigit() and int(index) < len(self.scales)

    @property
    def checked(self) -> tuple[dict[str, Any], ...]:
        """The sets whose outputs are compared whole: the trials, the hidden trials, the inputs of other shapes."""
        return self.trials + self.hidden + self.derived

    @property
    def timed_names(self) -> list[str]:
        """The compared timed trials' call names."""
        return [f"timed_{i}" for i in self.verified]

    def trial_set(self, index: int) -> dict[str, Any]:
        """The inputs of timed trial `index`: its timed set, scaled by its own factor, cut to its subsample."""
        base = self.timed_sets[index % len(self.timed_sets)]
        return {"name": f"timed_{index}", "seed": base["seed"], "transform": "scaled", "scale": self.scales[index],
                "sample": self.sample(f"timed_{index}")}

    def reference_sets(self) -> list[dict[str, Any]]:
        """Every set whose outputs the reference computes, extra calls' with the subsample the candidate's will be
        cut to."""
        audit = dict(self.audit, sample=self.sample("audit"))
        return [*self.checked, audit, *(self.trial_set(i) for i in self.verified)]

    def seeds(self) -> dict[str, int]:
        """Every set's seed (the factors are in the sets): what reproduces this check's inputs."""
        return {s["name"]: s["seed"] for s in (*self.checked, self.audit, *self.timed_sets)}

    def without(self, names: set[str]) -> Draw:
        return dataclasses.replace(self, hidden=tuple(s for s in self.hidden if s["name"] not in names))

    @property
    def asked_again(self) -> tuple[str, ...]:
        """The calls that ask once more, at the end, for a set of another shape in case the candidate refused it
        (nothing of the reference's to compare: a refusal then is as it should be, an answer fails the check)."""
        return tuple(f"{s['name']}{ASKED_AGAIN}" for s in self.derived if not s.get("again"))

    @property
    def shaped_names(self) -> frozenset[str]:
        """Every call on inputs of another shape the judge may make."""
        return frozenset(s["name"] for s in self.derived) | frozenset(self.asked_again)

    def source_name(self, call: str) -> str:
        """The set whose shapes a call has: a set of another shape asked for again has its source's."""
        again = {s["name"]: s["again"] for s in self.derived if s.get("again")}
        return again.get(call) or self.reference_name(call)

    def reference_name(self, call: str) -> str:
        """The reference set a candidate call is compared with (repeats are calls on the first trial's inputs; a
        set asked for again is the set's)."""
        if call.startswith("repeat_"):
            return self.trials[0]["name"]
        return call.removesuffix(ASKED_AGAIN) if call in self.asked_again else call
