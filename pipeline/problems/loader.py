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
    return set(_last_bindings(_parse(source, path)))


def decode_source(data: bytes, where: str) -> str:
    """Python source from a file's bytes: UTF-8, a leading byte-order mark dropped (Python itself accepts one);
    anything else is a ProblemError naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ProblemError(f"{where}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}): save it as UTF-8") from None


def read_source(path: str | Path) -> str:
    """A problem's or a kernel's source (see decode_source); ProblemError when it is missing or not UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"{path}: no such file")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ProblemError(f"{path}: cannot be read ({error.strerror})") from None
    return decode_source(data, str(path))


def _read(path: Path, what: str) -> str:
    if path.suffix != ".py":
        raise ProblemError(f"{path}: a {what} is a Python file (.py)")
    return read_source(path)


def check_problem_source(source: str, where: str) -> None:
    """Raise ProblemError unless `source` reads as a KernelBench problem (read, never run): `Model` a class with a
    base (an nn.Module), `get_inputs` and `get_init_inputs` functions."""
    tree = _parse(source, where)
    missing = [n for n in REQUIRED_NAMES if n not in top_level_names(source, where)]
    if missing:
        raise ProblemError(f"{where}: not a KernelBench problem, it does not define {', '.join(missing)}")
    bindings = _last_bindings(tree)
    model = bindings["Model"]
    if not isinstance(model, ast.ClassDef):
        raise ProblemError(f"{where}: not a KernelBench problem, Model is not a class (it must be a torch.nn.Module subclass)")
    if not [b for b in model.bases if not (isinstance(b, ast.Name) and b.id == "object")]:
        raise ProblemError(f"{where}: not a KernelBench problem, class Model has no base class (it must subclass torch.nn.Module)")
    for name in ("get_inputs", "get_init_inputs"):
        if not _is_function(bindings[name]):
            raise ProblemError(f"{where}: not a KernelBench problem, {name} is not a function")


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise ProblemError(f"{where}: not valid Python ({exc.msg}, line {exc.lineno})") from exc


def _last_bindings(tree: ast.Module) -> dict[str, ast.AST]:
    """The top-level statement that last binds each name (a def, a class, an assignment, an import)."""
    bound: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            bound[node.name] = node
        elif isinstance(node, ast.Assign):
            bound.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            bound[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(((a.asname or a.name).split(".")[0], node) for a in node.names)
    return bound


def _is_function(node: ast.AST) -> bool:
    """A def, an import of one, or a name assigned a lambda or another name (an alias)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Import, ast.ImportFrom)):
        return True
    value = getattr(node, "value", None)
    return isinstance(value, (ast.Lambda, ast.Name, ast.Attribute, ast.Call))


def load_problem(path: str | Path) -> Problem:
    """Validate a problem file (by reading it, not running it) and describe it."""
    path = Path(path).resolve()
    source = _read(path, "problem")
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
    return Candidate(path=str(path), fingerprint=fingerprint_text(_read(path, "candidate")))


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
