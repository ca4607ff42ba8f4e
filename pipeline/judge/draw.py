"""The draw: every input of one check, from the operating system's randomness, unknown to the candidate.

Imports: the standard library only.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any

HIDDEN_TRIALS = ("signed", "scaled")
SCALE_RANGE = (2.0, 8.0)  # the scaled trial multiplies floating inputs by a factor drawn from this range


def _seed() -> int:
    return secrets.randbelow(2**31 - 2) + 1


@dataclass(frozen=True)
class Draw:
    """The inputs of one check, drawn from the operating system's randomness: the trials (nominal inputs), the
    hidden trials (signed or scaled inputs), the audit call's inputs, the timed sets, and the subsample offset of
    every extra call (repeats, audit, timed) whose outputs are compared on a subsample."""

    trials: tuple[dict[str, Any], ...]
    hidden: tuple[dict[str, Any], ...]
    audit: dict[str, Any]
    timed: tuple[dict[str, Any], ...]
    offsets: dict[str, int]
    limit: int  # outputs with more elements than this are subsampled in extra calls

    @classmethod
    def new(cls, options, hidden: tuple[str, ...], timed_count: int) -> Draw:
        trials = tuple({"name": f"trial_{i + 1}", "seed": _seed()} for i in range(options.correctness_trials))
        made = []
        for kind in hidden:
            entry = {"name": kind, "seed": _seed(), "transform": kind}
            if kind == "scaled":
                low, high = SCALE_RANGE
                entry["scale"] = round(low + (high - low) * secrets.randbelow(10**6) / 10**6, 6)
            made.append(entry)
        timed = tuple({"name": f"timed_{k}", "seed": _seed()} for k in range(timed_count))
        extra = [f"repeat_{k + 1}" for k in range(options.repeat_calls)] + ["audit"] + [t["name"] for t in timed]
        offsets = {name: secrets.randbelow(2**62) for name in extra}
        return cls(trials, tuple(made), {"name": "audit", "seed": _seed()}, timed, offsets, options.subsample_above)

    def sample(self, call: str) -> dict[str, int]:
        return {"min_numel": self.limit, "elements": self.limit, "offset": self.offsets[call]}

    @property
    def checked(self) -> tuple[dict[str, Any], ...]:
        """The sets whose outputs are compared whole: the trials and the hidden trials."""
        return self.trials + self.hidden

    def reference_sets(self) -> list[dict[str, Any]]:
        """Every set the reference computes, extra calls' with the subsample the candidate's will be cut to."""
        extras = [dict(s, sample=self.sample(s["name"])) for s in (self.audit, *self.timed)]
        return [*self.checked, *extras]

    def seeds(self) -> dict[str, int]:
        """Every set's seed (and the scaled trial's factor is in its set): what reproduces this check's inputs."""
        return {s["name"]: s["seed"] for s in (*self.checked, self.audit, *self.timed)}

    def without(self, names: set[str]) -> Draw:
        return dataclasses.replace(self, hidden=tuple(s for s in self.hidden if s["name"] not in names))

    def reference_name(self, call: str) -> str:
        """The reference set a candidate call is compared with (repeats are calls on the first trial's inputs)."""
        return self.trials[0]["name"] if call.startswith("repeat_") else call
