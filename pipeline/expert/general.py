"""Kernels general in the batch: sizes read from the inputs at call time, not written as the problem's literals.

The templates write a kernel for the sizes the capture recorded. To make that kernel right on the user's batch
too, the same seed is written for the problem at two other leading sizes (the problem's `get_inputs` cut or
repeated, captured in one sandboxed process), and the three files are compared token by token:
- anything but a number differs (a mask dropped, another rule, another kernel): the seed stays specialised (its
  shape guard refuses other shapes in one line);
- a launch's tile or warp count differs: the problem's own value is kept (the templates mask and loop over their
  tiles, and a different structure would have shown as a token that differs), except a row kernel's RBLOCK, which
  may hold a whole reduction in registers: one that changes keeps the seed specialised;
- any other integer that differs must be one affine function of the leading size, a*B + c, at all three sizes
  (two fix it, the third checks it): it becomes `_egg_b` in the host code (read from the first input's
  `shape[0]` at the top of forward, passed to the host helpers that need it) and the runtime argument `EGG_B` of
  the kernels (no compile per batch size: Triton specialises only 1 and multiples of 16). Anything else (a float, a literal at module level, a kernel used
  other than by a direct launch) leaves the seed specialised.
The shape guard then checks every other size, stride and dtype as before, with the leading size free.

The judge checks the result on inputs it was not shown (pipeline.judge.shapes): the sizes used here are not the
judge's (halved, odd), so a fit that held only at these points would still be caught there.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

# keyword arguments of a launch that pick a tile or a schedule, never a size: the problem's value is kept
TILE_NAMES = ("BLOCK", "GROUP", "SPLIT", "WARPS", "STAGES", "CTAS")
# ...except a tile that must cover a size: a row kernel's RBLOCK holds a whole reduction in registers, so one that
# changes with the leading size keeps the seed specialised (the problem's value would drop elements at a larger batch)
COVERING = ("RBLOCK",)
HOST_NAME = "_egg_b"
KERNEL_NAME = "EGG_B"

_WRAPPER = '''

# --- egg: the problem at leading size {size} (pipeline.expert.general) ---
def _egg_sized_inputs(_egg_nominal=get_inputs):
    import torch as _egg_torch
    inputs = list(_egg_nominal())
    tensors = [i for i, x in enumerate(inputs) if isinstance(x, _egg_torch.Tensor) and x.dim() > 0]
    size = inputs[tensors[0]].shape[0]
    repeat = -(-{size} // size)

    def sized(x):
        return _egg_torch.cat([x] * repeat)[:{size}].clone() if repeat > 1 else x[:{size}].clone()

    chosen = [i for i in tensors if inputs[i].shape[0] == size] if {shared} else tensors[:1]
    return [sized(x) if i in chosen else {size} if {shared} and type(x) is int and x == size else x
            for i, x in enumerate(inputs)]


get_inputs = _egg_sized_inputs
'''


def other_sizes(batch: int) -> tuple[int, ...]:
    """Two other leading sizes to write the seed at: above the batch, so a batch of 1 or 2 has them too, and for no
    batch one the judge checks (half, odd below it, doubled plus one) or each other."""
    return (2 * batch + 3, 3 * batch + 4)


def sized_source(problem_source: str, size: int, shared: bool = True) -> str:
    """The problem with `get_inputs` giving the same draws at leading size `size` (cut, or repeated to grow): for
    every tensor input of the first one's leading size and any integer input equal to it (a row count passed beside
    the tensors), or (`shared` False) for the first tensor input alone, as the judge varies them."""
    return problem_source.rstrip("\n") + "\n" + _WRAPPER.format(size=int(size), shared=bool(shared))


@dataclass(frozen=True)
class Generalised:
    source: str  # the seed, general in the leading size (or the nominal source when `why` says why not)
    why: str = ""  # why the seed stays specialised ('' when it is general)
    literals: int = 0  # how many literals became expressions of the leading size


def generalise(nominal: str, batch: int, others: list[tuple[int, str]], first_input: str, largest: int | None = None) -> Generalised:
    """`nominal` (written for leading size `batch`) made general, from the same seed written at other sizes.
    `largest`: the largest leading size its 32-bit offsets allow (None: no bound), refused above it in one line."""
    if len(others) < 2:
        return Generalised(nominal, "no two other leading sizes to compare with")
    try:
        tokens = _code_tokens(nominal)
        other_tokens = [(size, _code_tokens(text)) for size, text in others]
    except (tokenize.TokenError, SyntaxError, IndentationError) as exc:
        return Generalised(nominal, f"the seed does not tokenize: {exc}")
    varying: dict[int, tuple[str, int, int]] = {}  # token index -> (form, a, c): the literal is form(a * B + c)
    for size, theirs in other_tokens:
        if len(theirs) != len(tokens):
            return Generalised(nominal, f"the seed written at leading size {size} has another structure")
    for index, token in enumerate(tokens):
        values = [(size, theirs[index]) for size, theirs in other_tokens]
        if all(t.string == token.string for _, t in values):
            continue
        if token.type == tokenize.STRING:
            continue  # a docstring or a message naming the sizes: the problem's text is kept
        if token.type != tokenize.NUMBER or any(t.type != tokenize.NUMBER for _, t in values):
            return Generalised(nominal, f"the seed written at another leading size differs at {token.string!r} (line {token.start[0]})")
        if _is_tile(tokens, index):
            if tokens[index - 2].string in COVERING and not _looped(nominal, token.start):
                return Generalised(nominal, f"{tokens[index - 2].string} (line {token.start[0]}) follows the leading size: a "
                                            "reduction held in registers covers it")
            continue
        fit = _fit(batch, token.string, [(size, t.string) for size, t in values])
        if fit is None:
            return Generalised(nominal, f"{token.string} (line {token.start[0]}) is no affine function of the leading size")
        varying[index] = fit
    if not varying:
        return Generalised(nominal, "")  # nothing depends on the leading size: already general
    try:
        source = _rewrite(nominal, tokens, varying, first_input, largest)
        compile(source, "<general>", "exec")
    except _Refused as exc:
        return Generalised(nominal, str(exc))
    except SyntaxError as exc:
        return Generalised(nominal, f"the general seed does not compile: {exc}")
    return Generalised(source, "", len(varying))


class _Refused(ValueError):
    pass


def _code_tokens(source: str) -> list[tokenize.TokenInfo]:
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]


def _number(text: str) -> int | float | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if type(value) in (int, float) else None


def _fit(batch: int, text: str, others: list[tuple[int, str]]) -> tuple[str, int, int] | None:
    """How a number that differs follows the leading size: an integer a*B + c ("int"), a float with an integral
    value ("float": an element count as a divisor), the reciprocal of one ("reciprocal": a mean's 1/count) or
    the unbiased variance's n / (n - 1) ("unbiased")."""
    values = [_number(text), *(_number(t) for _, t in others)]
    if any(v is None for v in values):
        return None
    sizes = [batch, *(size for size, _ in others)]
    if all(type(v) is int for v in values):
        fit = _affine(list(zip(sizes, values)))
        return ("int", *fit) if fit else None
    if all(float(v).is_integer() for v in values):
        fit = _affine([(b, int(v)) for b, v in zip(sizes, values)])
        return ("float", *fit) if fit else None
    for form, count in (("reciprocal", lambda v: 1.0 / v), ("unbiased", lambda v: v / (v - 1.0))):  # 1/n, n/(n-1)
        counts = [count(v) if v and v != 1.0 else 0.0 for v in values]
        if all(abs(n) >= 2 and abs(n - round(n)) <= 1e-6 * abs(n) for n in counts):
            fit = _affine([(b, round(n)) for b, n in zip(sizes, counts)])
            if fit:
                return (form, *fit)
    return None


def _looped(source: str, at: tuple[int, int]) -> bool:
    """Does the kernel launched by the call at `at` loop over its reduction in RBLOCK steps (so any RBLOCK covers it)?"""
    tree = ast.parse(source)
    kernels = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and _is_jit(n)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and (node.lineno, 0) <= (at[0], 0)
                and at[0] <= node.end_lineno and _called(node) in kernels):
            body = ast.get_source_segment(source, kernels[_called(node)]) or ""
            return "range(0, RNUMEL, RBLOCK)" in body
    return False


def _is_tile(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """`NAME=<number>` with a tile's or a schedule's name (XBLOCK=, BLOCK_M=, num_warps=, ...)."""
    if index < 2 or tokens[index - 1].string != "=" or tokens[index - 2].type != tokenize.NAME:
        return False
    name = tokens[index - 2].string.upper()
    return any(part in name for part in TILE_NAMES)


def _affine(points: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(a, c) with value = a * size + c at every point, a a nonzero integer (two points fix it, the rest check it)."""
    (b0, v0), (b1, v1), *rest = points
    if (v1 - v0) % (b1 - b0):
        return None
    a = (v1 - v0) // (b1 - b0)
    c = v0 - a * b0
    return (a, c) if a and all(a * b + c == v for b, v in rest) else None


def _expression(symbol: str, form: str, a: int, c: int) -> str:
    point = ".0" if form != "int" else ""
    text = symbol if a == 1 and form == "int" else f"{a}{point} * {symbol}"
    if c:
        text = f"{text} {'+' if c > 0 else '-'} {abs(c)}{point}"
    if form == "reciprocal":
        return f"(1.0 / ({text}))"
    if form == "unbiased":  # the unbiased variance's n / (n - 1)
        return f"(({text}) / ({text} - 1.0))"
    return text if text == symbol else f"({text})"


# The rewrite ---------------------------------------------------------------------------------------------------------


def _rewrite(source: str, tokens: list[tokenize.TokenInfo], varying: dict[int, tuple[str, int, int]], first_input: str,
             largest: int | None) -> str:
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    kernels = {name for name, node in functions.items() if _is_jit(node)}
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise _Refused("the seed has no ModelNew.forward")
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []  # (start, end, text) in (line, char col)
    needs: set[str] = set()  # the top-level functions that read the leading size
    for index, (form, a, c) in varying.items():
        token = tokens[index]
        owner = _owner(tree, token.start[0])
        if owner is None:
            raise _Refused(f"{token.string} (line {token.start[0]}) depends on the leading size outside any function")
        symbol = KERNEL_NAME if owner in kernels else HOST_NAME
        edits.append((token.start, token.end, _expression(symbol, form, a, c)))
        needs.add(owner)
    # who passes the size on: each launch of a kernel that reads it, each call of a helper that does, transitively
    calls = _calls(tree, functions, kernels)
    changed = True
    while changed:
        changed = False
        for owner, called in calls.items():
            if owner not in needs and called & needs:
                needs.add(owner)
                changed = True
    for name in needs - {"ModelNew"}:
        node = functions.get(name)
        if node is None:
            raise _Refused(f"{name} reads the leading size and is no function of the seed")
        edits.append(_parameter(lines, node, name in kernels))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = _called(node)
            if target in needs and target != "ModelNew":
                keyword = f"{KERNEL_NAME}={HOST_NAME}" if target in kernels else f"{HOST_NAME}={HOST_NAME}"
                edits.append(_argument(lines, node, keyword))
    _check_references(tree, needs & set(functions))
    edits += _runtime_sizes(tree, tokens, varying, functions, kernels)
    first = forward.body[0]
    indent = " " * first.col_offset
    lines_before = f"{indent}{HOST_NAME} = {first_input}.shape[0]  # the batch\n"
    if largest is not None:
        lines_before += (f"{indent}if {HOST_NAME} > {largest}:\n{indent}    raise ValueError(f\"egg: this ModelNew's kernels use 32-bit "
                         f"offsets, right for a leading size of {first_input} up to {largest}; got {{{HOST_NAME}}}\")\n")
    edits.append(((first.lineno, 0), (first.lineno, 0), lines_before))
    note = (f"# General in the leading size of {first_input}: a size the problem wrote as a number is read from "
            f"{first_input}.shape[0] ({HOST_NAME}; the argument {KERNEL_NAME} of kernels).\n")
    preamble = next((i for i, line in enumerate(lines) if line.startswith("import ")), 0)
    edits.append(((preamble + 1, 0), (preamble + 1, 0), note + "\n"))
    return _apply(lines, edits)


# Where a kernel needs a compile-time value: a size given to these stays a tl.constexpr (one compile per batch size)
_CONSTEXPR_USES = {"arange", "static_range", "full", "zeros", "reshape", "view", "broadcast_to", "static_assert", "constexpr",
                   "make_block_ptr", "make_tensor_descriptor"}


def _runtime_sizes(tree: ast.Module, tokens: list[tokenize.TokenInfo], varying: dict, functions: dict[str, ast.FunctionDef],
                   kernels: set[str]) -> list[tuple]:
    """A kernel's tl.constexpr parameter launched with a size that follows the batch (XNUMEL=16 -> XNUMEL=_egg_b)
    becomes a runtime argument where the kernel only computes with it (masks, offsets, loop bounds): a new batch
    size then compiles nothing new (Triton specialises only 1 and multiples of 16)."""
    at = {tokens[i].start for i in varying}
    sized: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in kernels:
            for keyword in node.keywords:
                if keyword.arg and any((n.lineno, n.col_offset) in at for n in ast.walk(keyword.value) if hasattr(n, "col_offset")):
                    sized.setdefault(_called(node), set()).add(keyword.arg)
    edits = []
    for name, params in sized.items():
        kernel = functions[name]
        fixed = _needed_at_compile_time(kernel, kernels)
        for arg in kernel.args.args:
            if arg.arg in params and arg.arg not in fixed and arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation):
                edits.append(((arg.lineno, arg.col_offset), (arg.end_lineno, arg.end_col_offset), arg.arg))
    return edits


def _needed_at_compile_time(kernel: ast.FunctionDef, kernels: set[str]) -> set[str]:
    """The names a kernel hands to something that needs a compile-time value (a tile's shape, another jit function)."""
    needed = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _CONSTEXPR_USES or name not in {"range", "min", "max", "abs"} and isinstance(func, ast.Name):
                needed |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return needed


def _is_jit(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in node.decorator_list)


def _owner(tree: ast.Module, line: int) -> str | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.lineno <= line <= node.end_lineno:
            return node.name
    return None


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Subscript):  # kernel[grid](...)
        func = func.value
    return func.id if isinstance(func, ast.Name) else None


def _calls(tree: ast.Module, functions: dict[str, ast.FunctionDef], kernels: set[str]) -> dict[str, set[str]]:
    known = set(functions)
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in kernels:
            found[node.name] = {_called(c) for c in ast.walk(node) if isinstance(c, ast.Call)} & known
    return found


def _check_references(tree: ast.Module, needs: set[str]) -> None:
    """A function that now takes the size must only be called directly (never stored, passed or launched later)."""
    direct = {id(c.func.value if isinstance(c.func, ast.Subscript) else c.func)
              for c in ast.walk(tree) if isinstance(c, ast.Call) and _called(c) in needs}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in needs and id(node) not in direct:
            raise _Refused(f"{node.id} is used other than by a direct call (line {node.lineno})")


def _col(lines: list[str], line: int, byte_col: int) -> int:
    """ast's column (UTF-8 bytes) as a character column."""
    return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _parameter(lines: list[str], node: ast.FunctionDef, kernel: bool) -> tuple:
    args = node.args
    if args.kwarg is not None:
        raise _Refused(f"{node.name} takes **kwargs")
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if kernel:
        text = KERNEL_NAME  # a runtime argument: a new batch size compiles nothing new (Triton specialises 1 and multiples of 16)
    else:
        text = HOST_NAME if (args.vararg or args.kwonlyargs) else f"*, {HOST_NAME}"
    if every or args.vararg:
        last = max([*every, *([args.vararg] if args.vararg else [])], key=lambda a: (a.end_lineno, a.end_col_offset))
        at = (last.end_lineno, _col(lines, last.end_lineno, last.end_col_offset))
        if any(d is not None for d in args.kw_defaults) or args.defaults:
            if kernel:
                raise _Refused(f"{node.name} has defaults")
        return (at, at, f", {text}")
    opening = lines[node.lineno - 1].index("(", _col(lines, node.lineno, node.col_offset))
    at = (node.lineno, opening + 1)
    return (at, at, text)


def _argument(lines: list[str], node: ast.Call, keyword: str) -> tuple:
    end = (node.end_lineno, _col(lines, node.end_lineno, node.end_col_offset) - 1)  # the closing parenthesis
    if lines[end[0] - 1][end[1]] != ")":
        raise _Refused(f"a call at line {node.lineno} does not end with its parenthesis")
    text = f", {keyword}" if node.args or node.keywords else keyword
    return (end, end, text)


def _apply(lines: list[str], edits: list[tuple[tuple[int, int], tuple[int, int], str]]) -> str:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    text = "".join(lines)
    offset = lambda at: starts[at[0] - 1] + at[1]  # noqa: E731
    for start, end, new in sorted(edits, key=lambda e: (offset(e[0]), offset(e[1])), reverse=True):
        text = text[: offset(start)] + new + text[offset(end):]
    return text
