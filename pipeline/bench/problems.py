"""The problems of a suite: every KernelBench-format file under the folders given, named by its path below them."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

LEVEL_FOLDER = re.compile(r"^level(\d+)$")
_MARKS = ("class Model", "def get_inputs")  # what a KernelBench problem file defines (read, never run here)


class SuiteError(ValueError):
    """A suite that cannot be run as asked (a missing folder, nothing found, a bad --level)."""


@dataclass(frozen=True)
class SuiteProblem:
    name: str  # the path below the folder given, without .py: level1/19_ReLU
    path: Path  # absolute
    level: int | None  # from a folder named level1..level4 on its path; None when there is none


def level_of(relative: Path) -> int | None:
    for part in relative.parts[:-1]:
        match = LEVEL_FOLDER.match(part)
        if match:
            return int(match.group(1))
    return None


def _number(name: str) -> int:
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else 1 << 30


def looks_like_problem(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return all(mark in text for mark in _MARKS)


def parse_levels(text: str | None) -> frozenset[int] | None:
    """`1,2` -> {1, 2}; None or empty: every level."""
    if not text:
        return None
    try:
        levels = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SuiteError(f"--level takes numbers separated by commas (1,2), not {text!r}") from None
    if not levels or min(levels) < 1:
        raise SuiteError(f"--level takes level numbers from 1 (1,2), not {text!r}")
    return levels


def _matches(name: str, patterns: list[str]) -> bool:
    """A pattern with a glob character is matched against the whole name, any other as a part of it."""
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(Path(name).name, pattern):
                return True
        elif pattern in name:
            return True
    return False


def _utf8_name(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8 in the name (Python holds it as a lone surrogate)
        return False
    return True


def discover(folders: list[Path], only: list[str] | None = None, levels: frozenset[int] | None = None,
             skipped: list[Path] | None = None) -> list[SuiteProblem]:
    """Every problem under `folders` (a file given is a problem itself), in level then number order. Names are
    unique: when two folders hold the same name, the second gets its folder's name in front. A file whose name is
    not UTF-8 is left out and added to `skipped` (the store and the report hold names as text)."""
    found: dict[str, SuiteProblem] = {}
    skipped = [] if skipped is None else skipped
    for folder in folders:
        if not folder.exists():
            raise SuiteError(f"{folder}: no such folder")
        root = folder.resolve()
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if p.name != "__init__.py" and not any(part.startswith(".") for part in p.relative_to(root).parts))
        for path in files:
            if not _utf8_name(path):
                skipped.append(path)
                continue
            if not looks_like_problem(path):
                continue
            relative = Path(path.name) if root.is_file() else path.relative_to(root)
            name = relative.with_suffix("").as_posix()
            if name in found:
                name = f"{root.name}/{name}"
            # a level folder below the one given, else the one given (KernelBench/level1), else a file's own folder
            level = level_of(relative) or level_of(Path(root.name) / relative) or level_of(Path(root.parent.name) / "x")
            found[name] = SuiteProblem(name, path, level)
    problems = [p for p in found.values() if (levels is None or p.level in levels) and (not only or _matches(p.name, only))]
    if not problems:
        where = ", ".join(str(f) for f in folders)
        raise SuiteError(f"no KernelBench-format problem (a file with class Model and get_inputs) in {where}"
                         + (" matches --only/--level" if found else ""))
    return sorted(problems, key=lambda p: (p.level or 0, str(Path(p.name).parent), _number(Path(p.name).name), p.name))
