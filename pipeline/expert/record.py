"""The first line of every candidate the expert backend writes: a small JSON record of how it was made.

    # egg-expert: {"v": 1, "problem": "3f2a...", "options": {...}, "rules": [...]}

Stage 2 only hands the backend the kernel's source, so the record is what lets it make a structural variant (the
same problem lowered with other options) and what a person reads first at a kernel gate. A file without it (a
person's or a model's kernel) gets only the repairs that work on any source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pipeline.expert.options import Options

PREFIX = "# egg-expert: "
VERSION = 1
_LINE = re.compile(r"^# egg-expert: (\{.*\})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Record:
    problem: str  # fingerprint of the problem source (the capture cache's key)
    options: Options
    rules: tuple[str, ...]  # the lowering rules and rewrites that made this candidate

    def line(self) -> str:
        data = {"v": VERSION, "problem": self.problem, "options": self.options.to_json(), "rules": list(self.rules)}
        return PREFIX + json.dumps(data, separators=(", ", ": "))


def read(source: str) -> Record | None:
    """The record in a candidate's source, or None (not written by this backend, or damaged)."""
    match = _LINE.search(source[:4000])
    if match is None:
        return None
    try:
        data = json.loads(match.group(1))
        if data.get("v") != VERSION:
            return None
        return Record(str(data["problem"]), Options.from_json(data["options"]), tuple(data.get("rules", ())))
    except (ValueError, KeyError, TypeError):
        return None


def body(source: str) -> str:
    """The source without its record line: what is compared to tell whether a variant changes the kernel at all
    (options a template ignores change the record alone)."""
    return _LINE.sub("", source, count=1)
