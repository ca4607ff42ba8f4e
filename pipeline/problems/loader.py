"""Find and validate KernelBench-format problem files without running them."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from pipeline.types import Candidate, Problem

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
_LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.IGNORECASE)
_ID_PREFIX = re.compile(r"^(\d+)_")


class ProblemError(ValueError):
    """A file that is not a usable problem (or candidate); the message says what is missing."""


def fingerprint_text(text: str) -> str:
    """Content fingerprint: sha256 of the source with line endings normalized."""
    return hashlib.sha256(text.replace("\r\n", "\n").encode()).hexdigest()


def top_level_names(source: str, path: str) -> set[str]:
    """Names a module binds at top level (classes, functions, assignments, imports)."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise ProblemError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno})") from exc
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _read(path: Path) -> str:
    if not path.is_file():
        raise ProblemError(f"{path}: no such file")
    return path.read_text(encoding="utf-8")


def check_problem_source(source: str, where: str) -> None:
    """Raise ProblemError unless `source` reads as a KernelBench problem (read, never run)."""
    missing = [n for n in REQUIRED_NAMES if n not in top_level_names(source, where)]
    if missing:
        raise ProblemError(f"{where}: not a KernelBench problem, it does not define {', '.join(missing)}")


def load_problem(path: str | Path) -> Problem:
    """Validate a problem file (by reading it, not running it) and describe it."""
    path = Path(path).resolve()
    source = _read(path)
    check_problem_source(source, str(path))
    level_match = _LEVEL_DIR.match(path.parent.name)
    id_match = _ID_PREFIX.match(path.stem)
    return Problem(
        path=str(path),
        name=path.stem,
        level=int(level_match.group(1)) if level_match else None,
        problem_id=int(id_match.group(1)) if id_match else None,
        fingerprint=fingerprint_text(source),
    )


def load_candidate(path: str | Path) -> Candidate:
    """Describe a candidate file. Whether it defines ModelNew is judged by the evaluator (compile_error)."""
    path = Path(path).resolve()
    return Candidate(path=str(path), fingerprint=fingerprint_text(_read(path)))


def _sort_key(problem: Problem) -> tuple:
    return (
        problem.level if problem.level is not None else 10**9,
        problem.problem_id if problem.problem_id is not None else 10**9,
        problem.name,
    )


def load_suite(*roots: str | Path) -> list[Problem]:
    """Every problem file under the given folders (or files), ordered by level, id and name.

    KernelBench's layout (`levelN/<id>_<Name>.py`) works as is; `.py` files that do not define the three
    required names are not problems and are passed over.
    """
    problems: dict[str, Problem] = {}
    for root in map(Path, roots):
        if root.is_file():
            problem = load_problem(root)
            problems[problem.path] = problem
            continue
        if not root.is_dir():
            raise ProblemError(f"{root}: no such file or folder")
        for file in sorted(root.rglob("*.py")):
            if file.name.startswith("_") or "__pycache__" in file.parts:
                continue
            try:
                problem = load_problem(file)
            except ProblemError:
                continue
            problems[problem.path] = problem
    if not problems:
        raise ProblemError(f"no problem files (defining {', '.join(REQUIRED_NAMES)}) under {', '.join(map(str, roots))}")
    return sorted(problems.values(), key=_sort_key)
