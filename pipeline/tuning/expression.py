"""Small arithmetic and boolean expressions over named values, for constraints and grids declared as text.

An agent writes `(BLOCK_M + BLOCK_N) * BLOCK_K * 4 * num_stages <= 232448`; we parse it with `ast`, allow only
numbers, names, arithmetic, comparisons, `and`/`or`/`not`, conditional expressions, tuples and a few functions,
and evaluate the tree ourselves (never `eval`). Standard library only.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ExpressionError(ValueError):
    """The text is not an allowed expression, or names something unknown."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


FUNCTIONS = {"min": min, "max": max, "cdiv": _cdiv, "next_power_of_2": _next_power_of_2, "abs": abs}
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


@dataclass(frozen=True)
class Expression:
    """A parsed, checked expression; `evaluate(values)` computes it."""

    text: str
    tree: ast.expr

    @classmethod
    def parse(cls, text: str, names: Sequence[str] | None = None) -> Expression:
        """Parse `text`; when `names` is given, every name used must be one of them (or a known function)."""
        if not isinstance(text, str) or not text.strip():
            raise ExpressionError("the expression is empty")
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            raise ExpressionError(f"not a valid expression: {text!r} ({exc.msg})") from None
        _check(tree, set(names) if names is not None else None)
        return cls(text.strip(), tree)

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        return _evaluate(self.tree, values)


def _check(node: ast.AST, names: set[str] | None) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, bool)):
            raise ExpressionError(f"only numbers and booleans may appear as constants, not {node.value!r}")
    elif isinstance(node, ast.Name):
        if names is not None and node.id not in names:
            raise ExpressionError(f"unknown name {node.id!r} (known: {sorted(names)})")
    elif isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS) or node.keywords:
            raise ExpressionError(f"only these functions may be called, positionally: {sorted(FUNCTIONS)}")
        for arg in node.args:
            _check(arg, names)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, names)
        _check(node.right, names)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        _check(node.operand, names)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        for child in [node.left, *node.comparators]:
            _check(child, names)
    elif isinstance(node, (ast.BoolOp, ast.Tuple)):
        for child in node.values if isinstance(node, ast.BoolOp) else node.elts:
            _check(child, names)
    elif isinstance(node, ast.IfExp):
        for child in (node.test, node.body, node.orelse):
            _check(child, names)
    else:
        raise ExpressionError(f"{type(node).__name__} is not allowed in an expression ({ast.unparse(node)!r})")


def _evaluate(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise ExpressionError(f"no value for {node.id!r}")
        return values[node.id]
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*(_evaluate(a, values) for a in node.args))
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, values))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        results = (_evaluate(v, values) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, values) else node.orelse, values)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e, values) for e in node.elts)
    raise ExpressionError(f"cannot evaluate {type(node).__name__}")
