"""The host side of a candidate: torch calls written back as source (views, library calls, a library GEMM or
convolution), and the problem's own `__init__`, so the candidate builds the same parameters in the same order."""

from __future__ import annotations

import ast
import io
import math
import re
import textwrap
import tokenize
from typing import Any

from pipeline.expert.graph import Device, DType, Named, Slice
from pipeline.expert.ir import Node, V


class SourceError(ValueError):
    """The problem file lacks what a candidate must mirror (class Model with __init__ and forward)."""


def param_path(name: str) -> str:
    """`net.0.weight` as attribute access on self: `self.net[0].weight`."""
    text = "self"
    for part in name.split("."):
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


def variable(name: str) -> str:
    return re.sub(r"\W", "_", name)


def literal(value: Any, names: dict[int, str]) -> str:
    """An argument as Python source; V refs become the host variable holding the value."""
    if isinstance(value, V):
        return names[value.id]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, tuple):
        inner = ", ".join(literal(v, names) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, DType):
        return f"torch.{value.name}"
    if isinstance(value, Device):
        return "device"  # the forward's device: the recording ran on meta or CPU tensors
    if isinstance(value, Slice):
        return f"slice({literal(value.start, names)}, {literal(value.stop, names)}, {literal(value.step, names)})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, Named):
        return value.name
    raise SourceError(f"cannot write {value!r} as source")


def _index(value: Any, names: dict[int, str]) -> str:
    """A subscript as source: `x[0]`, `x[:, 1:3]`, `x[..., None]`."""
    items = value if isinstance(value, tuple) else (value,)
    parts = []
    for item in items:
        if isinstance(item, Slice):
            start = "" if item.start is None else literal(item.start, names)
            stop = "" if item.stop is None else literal(item.stop, names)
            step = "" if item.step is None else f":{literal(item.step, names)}"
            parts.append(f"{start}:{stop}{step}")
        else:
            parts.append(literal(item, names))
    return ", ".join(parts) if parts else "()"


def call_source(node: Node, names: dict[int, str]) -> str:
    """A view or library node as the torch expression that computes it."""
    args, kwargs = node.args
    fn = node.fn
    space, _, name = fn.rpartition(".")
    rendered = [literal(a, names) for a in args]
    rendered += [f"{k}={literal(v, names)}" for k, v in kwargs]
    if fn == "Tensor.__getitem__":
        text = f"{rendered[0]}[{_index(args[1], names)}]"
    elif space == "Tensor":
        method = f"{rendered[0]}.{name}"
        text = method if name in ("T", "mT", "H", "mH") else f"{method}({', '.join(rendered[1:])})"
    else:
        text = f"{fn}({', '.join(rendered)})"
    return f"{text}[{node.attr('index')}]" if node.attr("tuple_output") else text


def matmul_source(node: Node, names: dict[int, str]) -> str:
    a, b = (names[v.id] for v in node.args)
    return f"torch.matmul({a}, {b})"


def conv_source(node: Node, names: dict[int, str]) -> str:
    x, w = (names[v.id] for v in node.args)
    return (f"F.conv2d({x}, {w}, None, stride={node.attr('stride')}, padding={node.attr('padding')}, "
            f"dilation={node.attr('dilation')}, groups={node.attr('groups')})")


# the problem file ------------------------------------------------------------------------------------------------


def model_parts(problem_source: str) -> tuple[str, list[str], list[str]]:
    """(Model's class body without forward, forward's argument names, the module-level statements a candidate keeps).

    The body keeps everything the problem's Model has but its forward: class attributes (`expansion = 1`), other
    methods (`_make_layer`), properties and `__init__`, so ModelNew builds the same parameters and exposes the same
    names. `Model` inside it becomes `ModelNew` (`super(Model, self)`, `Model.expansion`)."""
    tree = ast.parse(problem_source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise SourceError("the problem defines no class Model")
    methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)}
    if "forward" not in methods:
        raise SourceError("Model has no forward method")
    forward = methods["forward"]
    if forward.args.vararg or forward.args.kwonlyargs or forward.args.kwarg:
        raise SourceError("Model.forward takes *args, keyword-only arguments or **kwargs")
    args = [a.arg for a in forward.args.args[1:]]
    return _class_body(problem_source, model), args, _kept(problem_source, tree)


def _class_body(problem_source: str, model: ast.ClassDef) -> str:
    lines = problem_source.splitlines()
    parts = []
    for node in model.body:
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is model.body[0]:
            continue  # the class docstring
        first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        parts.append(textwrap.dedent("\n".join(lines[first - 1:node.end_lineno])))
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in model.body):
        parts.insert(0, "def __init__(self):\n    super().__init__()")
    return textwrap.indent(_renamed("\n\n".join(parts), "Model", "ModelNew"), "    ")


def _renamed(source: str, old: str, new: str) -> str:
    """`source` with every name token `old` (not inside strings or comments) written as `new`."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    edits = [(t.start, t.end) for t in tokens if t.type == tokenize.NAME and t.string == old]
    lines = source.splitlines(keepends=True)
    for (row, start), (_, end) in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + new + line[end:]
    return "".join(lines)


def _kept(problem_source: str, tree: ast.Module) -> list[str]:
    kept = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            continue
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue
        if isinstance(node, ast.If):
            continue  # `if __name__ == "__main__":` blocks and the like
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            continue  # the module docstring
        kept.append(ast.get_source_segment(problem_source, node))
    return kept
