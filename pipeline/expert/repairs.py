"""The Debug role by rules: known repairs, chosen from the verdict's status, reason and log tail, tried in order
before a seed is given up.

- shared-memory overflow (compile error "out of resource: shared memory") -> smaller tiles, one pipeline stage fewer;
- a mismatch in a kernel that multiplies on tensor cores (tl.dot without exact fp32), or the judge's ban of a TF32
  dot on an fp32 problem -> input_precision="ieee";
- a non-contiguous input (a stride or contiguity complaint, or a wrong answer from a kernel that assumes packed
  rows) -> the forward makes its tensor arguments contiguous;
- an illegal address (offsets past 2**31) -> 64-bit index arithmetic;
- for the expert's own kernels, when none of these is named: the next safer lowering (rows streamed, then the
  library GEMM and convolution), as long as the judge would not call it delegation.
Source repairs edit the file's text where `ast` locates the code, so comments and layout survive; a repair that
would change nothing is never proposed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.expert.options import Options
from pipeline.types import EvalResult, Status

SHARED = re.compile(r"out of resource: shared memory|outofresources|shared memory.*(required|limit|exceed)", re.IGNORECASE)
LAYOUT = re.compile(r"contiguous|stride|view size is not compatible", re.IGNORECASE)
ADDRESS = re.compile(r"illegal memory access|illegal address|out of bounds|segmentation fault|signal 11|SIGSEGV", re.IGNORECASE)


@dataclass(frozen=True)
class Repair:
    rule: str
    cause: str
    source: str | None = None  # a repaired file, or None when `options` are to be lowered again
    options: Options | None = None


def evidence(verdict: EvalResult) -> str:
    return f"{verdict.reason}\n{verdict.log_tail}"


# source repairs (any kernel) ---------------------------------------------------------------------------------------


def smaller_tiles(source: str) -> str:
    """Every BLOCK_* a launch passes halved (not below 16) and num_stages one lower (not below 2). A block size
    passed through a variable is halved right after the variable is set, so a grid computed from it agrees."""
    inserts: dict[int, list[str]] = {}
    for function in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)):
        for call in (c for c in ast.walk(function) if isinstance(c, ast.Call) and isinstance(c.func, ast.Subscript)):
            for kw in call.keywords:
                if kw.arg and kw.arg.startswith("BLOCK") and isinstance(kw.value, ast.Name):
                    _halve_after_assignment(function, kw.value.id, call.lineno, inserts)
    lines = source.splitlines(keepends=True)
    for row in sorted(inserts, reverse=True):
        lines[row:row] = inserts[row]
    source = "".join(lines)
    source = re.sub(r"\b(BLOCK_\w*)=(\d+)", lambda m: f"{m.group(1)}={max(16, int(m.group(2)) // 2)}", source)
    return re.sub(r"\bnum_stages=(\d+)", lambda m: f"num_stages={max(2, int(m.group(1)) - 1)}", source)


def _halve_after_assignment(function: ast.FunctionDef, name: str, before_line: int, inserts: dict[int, list[str]]) -> None:
    assignments = [n for n in ast.walk(function) if isinstance(n, ast.Assign) and n.lineno < before_line
                   and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    if not assignments:
        return
    last = max(assignments, key=lambda n: n.lineno)
    line = f"{' ' * last.col_offset}{name} = max(16, {name} // 2)  # repair: smaller tiles fit the shared memory\n"
    if line not in inserts.setdefault(last.end_lineno, []):
        inserts[last.end_lineno].append(line)


def exact_dots(source: str) -> str:
    """Every tl.dot computes in exact fp32: input_precision set to "ieee", TF32 switches dropped."""
    lines = source.splitlines(keepends=True)

    def at(row: int, col: int) -> int:  # ast's (line, UTF-8 byte column) as an index into the text
        return sum(len(line) for line in lines[: row - 1]) + len(lines[row - 1].encode()[:col].decode(errors="ignore"))

    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) in ("tl.dot", "triton.language.dot")):
            continue
        named = [kw for kw in node.keywords if kw.arg in ("input_precision", "allow_tf32")]
        for kw in named:
            value = '"ieee"' if kw.arg == "input_precision" else "False"
            if ast.unparse(kw.value) not in ("'ieee'", "False"):
                edits.append((at(kw.value.lineno, kw.value.col_offset), at(kw.value.end_lineno, kw.value.end_col_offset), value))
        if not named and len(node.args) < 4:
            end = at(node.end_lineno, node.end_col_offset) - 1  # just before the closing parenthesis
            edits.append((end, end, ', input_precision="ieee"'))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def contiguous_inputs(source: str) -> str:
    """ModelNew.forward starts by making each tensor argument contiguous (a no-op when it already is)."""
    tree = ast.parse(source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None or not forward.body:
        return source
    names = [a.arg for a in forward.args.args[1:]]
    first = forward.body[0]
    lines = source.splitlines(keepends=True)
    indent = " " * first.col_offset
    guard = "".join(f"{indent}{n} = {n}.contiguous() if isinstance({n}, torch.Tensor) else {n}\n" for n in names
                    if f"{n} = {n}.contiguous()" not in source)
    if not guard:
        return source
    head = f"{indent}# the kernels index packed rows: a strided input is packed first\n"
    return "".join(lines[: first.lineno - 1]) + head + guard + "".join(lines[first.lineno - 1:])


def uses_dot(source: str) -> bool:
    return "tl.dot(" in source


def all_dots_exact(source: str) -> bool:
    return exact_dots(source) == source


# the choice ---------------------------------------------------------------------------------------------------------


def candidates(source: str, verdict: EvalResult, options: Options | None) -> list[Repair]:
    """Every repair that applies to this failure, most specific first."""
    text = evidence(verdict)
    found: list[Repair] = []
    add = found.append
    if verdict.status is Status.COMPILE_ERROR and SHARED.search(text):
        cause = "the kernel needs more shared memory than the H200 has per block: smaller tiles, one pipeline stage fewer"
        if options is not None:
            tile = options.gemm_tile or (128, 128, 32)
            add(Repair("smaller_tiles", cause, options=options.but(gemm_tile=(max(16, tile[0] // 2), max(16, tile[1] // 2), tile[2]),
                                                                    num_stages=max(2, (options.num_stages or 3) - 1))))
        add(Repair("smaller_tiles", cause, source=smaller_tiles(source)))
    downgraded = verdict.status is Status.BANNED and "precision_downgrade" in verdict.reason
    if (verdict.status is Status.MISMATCH or downgraded) and uses_dot(source) and not all_dots_exact(source):
        cause = "a wrong answer from a kernel multiplying on tensor cores below fp32: every tl.dot in exact fp32 (ieee)"
        if options is not None and options.precision != "ieee":
            add(Repair("exact_fp32_dot", cause, options=options.but(precision="ieee")))
        add(Repair("exact_fp32_dot", cause, source=exact_dots(source)))
    layout_named = LAYOUT.search(text) and verdict.status in (Status.MISMATCH, Status.RUNTIME_ERROR)
    if layout_named or (options is None and verdict.status is Status.MISMATCH):
        add(Repair("contiguous_inputs", "the kernels read packed rows: strided inputs are made contiguous first",
                   source=contiguous_inputs(source)))
    if verdict.status is Status.RUNTIME_ERROR and ADDRESS.search(text) and options is not None and not options.wide_index:
        add(Repair("wide_index", "an illegal address: offsets past 2**31 wrap in 32-bit index arithmetic", options=options.but(wide_index=True)))
    if options is not None and verdict.status in (Status.MISMATCH, Status.RUNTIME_ERROR, Status.COMPILE_ERROR, Status.TIMEOUT):
        for rule, cause, change in _ladder(options):
            add(Repair(rule, cause, options=change))
    return [r for r in found if r.source is None or r.source != source]


def _ladder(options: Options) -> list[tuple[str, str, Options]]:
    steps: list[tuple[str, str, Callable[[Options], Options | None]]] = [
        ("streamed_rows", "rows streamed in chunks instead of held in registers",
         lambda o: o.but(reduction="looped") if o.reduction != "looped" else None),
        ("library_gemm", "the GEMMs and convolutions handed to cuBLAS/cuDNN, the rest kept in Triton",
         lambda o: o.but(gemm="library", conv="library") if (o.gemm, o.conv) != ("library", "library") else None),
    ]
    return [(rule, cause, change) for rule, cause, make in steps if (change := make(options)) is not None]
