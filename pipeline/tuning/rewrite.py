"""Writing the winning configuration back into a kernel's source, so the file needs no autotuning at run time.

`bake_config(source, kernel, config)` removes a `@triton.autotune(...)` decorator from the kernel and makes every
launch `kernel[grid](...)` pass the chosen constexprs and launch options (num_warps, num_stages). A value a launch
passes through a local variable is baked where the variable is assigned, so a grid computed from the same
variable stays consistent. Locations come from `ast`; the edits are made on the text, so comments and layout
survive. Anything that cannot be baked safely is a `RewriteError` that says why.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.tuning.space import LAUNCH_OPTIONS, Value


class RewriteError(ValueError):
    """The configuration cannot be written into this source safely; the message says where and why."""


@dataclass(frozen=True)
class Edit:
    """Replace the text between two (line, column) positions (1-based lines, UTF-8 byte columns, as ast gives)."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def bake_config(source: str, kernel: str, config: Mapping[str, Value], *, current: Mapping[str, Value] | None = None,
                note: str = "") -> str:
    """The source with `config` baked into `kernel`'s definition and launches. `note` becomes a comment above it.

    Values equal to `current` (what the source already launches with at the tuned shape) are left as the source
    computes them, so a size derived from the shape (`triton.next_power_of_2(n_cols)`) stays general. (An
    autotuned kernel's launches pass no values: there every value is written.)
    """
    tree = ast.parse(source)
    function = _kernel_def(tree, kernel)
    if current is not None and not any(_is_autotune(d) for d in function.decorator_list):
        config = {k: v for k, v in config.items() if k not in current or current[k] != v}
    params = [a.arg for a in function.args.args]
    constexprs = _constexpr_params(function)
    unknown = [name for name in config if name not in constexprs and name not in LAUNCH_OPTIONS]
    if unknown:
        raise RewriteError(f"{kernel} has no constexpr parameter {unknown} (constexprs: {constexprs})")
    launches = _launches(tree, kernel)
    if not launches:
        raise RewriteError(f"no launch `{kernel}[grid](...)` found in the source")
    edits = _decorator_edits(function, source)
    if note:
        first = min([function.lineno] + [d.lineno for d in function.decorator_list])
        edits.append(Edit((first, 0), (first, 0), "".join(f"# {line}\n" for line in note.splitlines())))
    for scope, call in launches:
        edits += _launch_edits(scope, call, params, config, source)
    return _apply(source, edits)


def _kernel_def(tree: ast.Module, kernel: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel:
            return node
    raise RewriteError(f"no module-level function named {kernel}")


def _constexpr_params(function: ast.FunctionDef) -> list[str]:
    def is_constexpr(annotation: ast.expr | None) -> bool:
        text = ast.unparse(annotation) if annotation is not None else ""
        return text.strip("'\"").split(".")[-1] == "constexpr"

    return [a.arg for a in function.args.args if is_constexpr(a.annotation)]


def _is_autotune(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "autotune") or (isinstance(target, ast.Name) and target.id == "autotune")


def _decorator_edits(function: ast.FunctionDef, source: str) -> list[Edit]:
    """Remove the autotune decorator's lines (from its `@` to the end of its line)."""
    edits = []
    for decorator in function.decorator_list:
        if _is_autotune(decorator):
            edits.append(Edit((decorator.lineno, 0), (decorator.end_lineno + 1, 0), ""))
    return edits


def _launches(tree: ast.Module, kernel: str) -> list[tuple[ast.AST, ast.Call]]:
    """Every `kernel[grid](...)` call, with the function (or module) it appears in."""
    found = []

    def visit(scope: ast.AST, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Subscript) and _names(child.func.value, kernel):
                found.append((inner, child))
            visit(inner, child)

    visit(tree, tree)
    return found


def _names(node: ast.expr, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def _launch_edits(scope: ast.AST, call: ast.Call, params: list[str], config: Mapping[str, Value], source: str) -> list[Edit]:
    """Edits that make one launch pass every value of `config`."""
    if any(k.arg is None for k in call.keywords):
        raise RewriteError(f"line {call.lineno}: the launch passes **kwargs, so the values it passes are unknown")
    keywords = {k.arg: k.value for k in call.keywords}
    edits: list[Edit] = []
    missing: list[str] = []
    variables: dict[str, Value] = {}
    for name, value in config.items():
        index = params.index(name) if name in params else -1
        node = keywords.get(name) or (call.args[index] if 0 <= index < len(call.args) else None)
        if node is None:
            missing.append(name)
        elif isinstance(node, ast.Name):
            if variables.get(node.id, value) != value:
                raise RewriteError(f"line {call.lineno}: `{node.id}` is passed for two parameters that the config sets differently")
            variables[node.id] = value
        else:
            edits.append(Edit((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset), repr(value)))
    if variables:
        edits += _assignment_edits(scope, variables, call.lineno)
    if missing:
        edits.append(_append_keywords(call, {n: config[n] for n in missing}, source))
    return edits


def _assignment_edits(scope: ast.AST, variables: Mapping[str, Value], line: int) -> list[Edit]:
    """Bake each variable's value where it is assigned in `scope` (every assignment, so every branch agrees)."""
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        passed_in = {a.arg for a in scope.args.args + scope.args.kwonlyargs} & set(variables)
        if passed_in:
            raise RewriteError(f"line {line}: the launch passes the parameter(s) {sorted(passed_in)}, which its caller chooses")
    edits: list[Edit] = []
    baked: set[str] = set()
    for node in _walk_scope(scope):
        targets = [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else getattr(node, "targets", [])
        unpacked = [e for t in targets if isinstance(t, (ast.Tuple, ast.List)) for e in t.elts]
        hit = [t.id for t in targets + unpacked if isinstance(t, ast.Name) and t.id in variables]
        if not hit:
            continue
        if isinstance(node, ast.AugAssign) or unpacked:
            raise RewriteError(f"line {node.lineno}: `{hit[0]}` is updated in place or unpacked; cannot bake it")
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            edits.append(_replace(node.value, repr(variables[hit[0]])))
        elif isinstance(node, ast.Assign):
            edits.append(_split_assignment(node, variables))
        baked.update(hit)
    missing = sorted(set(variables) - baked)
    if missing:
        raise RewriteError(f"line {line}: no assignment of {missing} found to bake")
    return edits


def _walk_scope(scope: ast.AST):
    """Nodes of `scope` without descending into nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _split_assignment(node: ast.Assign, variables: Mapping[str, Value]) -> Edit:
    """`a = b = expr` with `b` baked becomes `a = expr` and `b = value` on their own lines."""
    if len(node.targets) == 1:
        return _replace(node.value, repr(variables[node.targets[0].id]))
    expr = ast.unparse(node.value)
    indent = " " * node.col_offset
    lines = [f"{t.id} = {repr(variables[t.id]) if t.id in variables else expr}" for t in node.targets]
    return Edit((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset), ("\n" + indent).join(lines))


def _replace(node: ast.expr, text: str) -> Edit:
    return Edit((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset), text)


def _append_keywords(call: ast.Call, values: Mapping[str, Value], source: str) -> Edit:
    """Insert `NAME=value` keywords just before the launch's closing parenthesis."""
    last = max([*call.args, *(k.value for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset), default=None)
    text = ", ".join(f"{name}={value!r}" for name, value in values.items())
    if last is None:
        end = (call.end_lineno, call.end_col_offset - 1)
        return Edit(end, end, text)
    position = (last.end_lineno, last.end_col_offset)
    return Edit(position, position, ", " + text)


def _apply(source: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits (positions in ast's line/byte-column form) and check the result parses."""
    lines = source.encode().splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        row, column = position
        return starts[min(row - 1, len(lines))] + column

    data = source.encode()
    spans = sorted({(offset(e.start), offset(e.end), e.text) for e in edits}, reverse=True)
    for (start, end, _), (next_start, _, _) in zip(spans[1:], spans[:-1]):
        if end > next_start:
            raise RewriteError("two edits overlap (a value is both passed and assigned in one place)")
    for start, end, text in spans:
        data = data[:start] + text.encode() + data[end:]
    result = data.decode()
    try:
        ast.parse(result)
    except SyntaxError as exc:
        raise RewriteError(f"the rewritten source does not parse: {exc}") from None
    return result

