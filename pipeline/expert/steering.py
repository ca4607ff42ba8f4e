"""What a reviewer's words ask of the expert backend, and the moves that need no template of its own.

A rejection's feedback is read for the parts a rule can act on:
- a bound on a tunable: `XBLOCK>1`, `BLOCK_N=128`, `num_warps<=4` (an upper-case constexpr name, num_warps or
  num_stages, an operator, an integer);
- a topic to avoid or to prefer: "no fusion", "avoid split-K", "try a persistent grid", "keep cuBLAS";
- "exact fp32" (no TF32 passes).
Every other clause is reported back as not acted on, so the gate says what the backend did not hear.

A plan's fixes are read with the same topics: the structural variants tried are those its fixes call for, so a fix
the reviewer deleted is not tried and one they added is, where a rule implements it.

Any Triton file (a person's, a model's) gets the moves that read only its launches: its constexpr block sizes and
`num_warps`/`num_stages` found where a launch passes them as numbers, offered to the tuning engine, and the
reviewer's bounds written into the launches (pipeline.tuning.rewrite).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from pipeline.agents.backend import VERDICT_NOTE
from pipeline.tuning.rewrite import RewriteError, bake_config

_OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
        "=": lambda a, b: a == b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_BOUND = re.compile(r"\b([A-Z][A-Z0-9_]*[A-Z0-9]|num_warps|num_stages)\s*(>=|<=|==|!=|=|>|<)\s*(\d{1,6})\b")
_AVOID = re.compile(r"\b(no|not|don'?t|do not|avoid|never|without|stop|drop|nothing to|instead of|rather than)\b", re.I)
LAUNCH = ("num_warps", "num_stages")

# topic -> the words that name it (in feedback and in a plan's fixes)
TOPICS: dict[str, re.Pattern] = {
    "fusion": re.compile(r"\bfus(e|es|ed|ion|ing)\b|\bone launch\b", re.I),
    "split_k": re.compile(r"\bsplit[-_ ]?k\b|\bk is split\b|\bsplit (the )?reduction\b", re.I),
    "persistent": re.compile(r"\bpersistent (grid|kernel|program)", re.I),
    "swizzle": re.compile(r"\bswizzl|\bgrouped\b.*\border\b|\bgroup_m\b|\btile order\b", re.I),
    "larger_tile": re.compile(r"\b(larger|bigger|wider)( output)? tiles?\b", re.I),
    "smaller_tile": re.compile(r"\b(smaller|shorter) (output )?(tiles?|block)\b|\bsplit the tile\b", re.I),
    "streamed_rows": re.compile(r"\bstream(ed|ing)?\b|\blooped\b|\bchunks?\b", re.I),
    "rows_in_registers": re.compile(r"\bregisters?\b|\blive values\b", re.I),
    "pipelining": re.compile(r"\bpipelin|\bpipeline stages\b|\bnum_stages\b", re.I),
    "vector": re.compile(r"\bvector(ized)?\b", re.I),
    "library": re.compile(r"\bcublas\b|\bcudnn\b|\blibrary\b|\btorch\.matmul\b", re.I),
    "warps": re.compile(r"\bnum_warps\b|\bwarps\b", re.I),
    "coalescing": re.compile(r"\bcoalesc", re.I),
}
_EXACT = re.compile(r"\bexact(ly)? fp32\b|\bieee\b|\b(no|without|not) tf32\b|\bfull fp32\b", re.I)


@dataclass(frozen=True)
class Bound:
    name: str
    op: str
    value: int

    def holds(self, value: int) -> bool:
        return _OPS[self.op](value, self.value)

    def text(self) -> str:
        return f"{self.name}{self.op}{self.value}"


@dataclass(frozen=True)
class Steering:
    """What the feedback asks, and what of it no rule can act on."""

    bounds: tuple[Bound, ...] = ()
    avoid: frozenset[str] = frozenset()
    prefer: frozenset[str] = frozenset()
    exact_fp32: bool = False
    unread: tuple[str, ...] = ()  # clauses nothing here acts on
    clauses: int = 0

    @property
    def actionable(self) -> bool:
        return bool(self.bounds or self.avoid or self.prefer or self.exact_fp32)

    def heard(self) -> str:
        """One line: what the backend took from the feedback."""
        parts = [b.text() for b in self.bounds] + [f"avoid {t}" for t in sorted(self.avoid)] + \
                [f"prefer {t}" for t in sorted(self.prefer)] + (["exact fp32"] if self.exact_fp32 else [])
        return ", ".join(parts)

    def report(self) -> str:
        """What the rationale says about the feedback ('' when there was none)."""
        if not self.clauses:
            return ""
        said = f" Feedback acted on: {self.heard()}." if self.actionable else " No part of the feedback names a bound, rule or topic the expert's rules act on."
        if self.unread and self.actionable:
            said += f" Not acted on: {'; '.join(repr(u) for u in self.unread[:3])}."
        return said


def read_feedback(feedback: str) -> Steering:
    """The reviewer's feedback (one line per rejection), read for bounds, topics and exactness."""
    bounds: dict[tuple[str, str], Bound] = {}
    avoid: set[str] = set()
    prefer: set[str] = set()
    exact, unread, clauses = False, [], 0
    for clause in re.split(r"[\n;:]|,\s+|\.\s+|\bbut\b", feedback.replace(VERDICT_NOTE, "")):
        clause = clause.strip(" .")
        if not clause:
            continue
        clauses += 1
        found = False
        for match in _BOUND.finditer(clause):
            bound = Bound(match.group(1), match.group(2), int(match.group(3)))
            bounds[(bound.name, bound.op)] = bound  # a later line overrides an earlier one
            found = True
        if _EXACT.search(clause):
            exact = found = True
        rest = _BOUND.sub(" ", clause)
        for topic, pattern in TOPICS.items():
            hit = pattern.search(rest)
            if hit is None or (topic == "warps" and any(b.name == "num_warps" for b in bounds.values())):
                continue
            negated = _AVOID.search(rest[: hit.start()]) or re.search(r"\b(isn'?t|is not)\b|\bnothing\b", rest, re.I)
            (avoid if negated else prefer).add(topic)
            (prefer if negated else avoid).discard(topic)
            found = True
        if not found:
            unread.append(clause[:80])
    return Steering(tuple(bounds.values()), frozenset(avoid), frozenset(prefer), exact, tuple(unread), clauses)


def topics_of(text: str) -> set[str]:
    """The topics a plan's fix names."""
    return {topic for topic, pattern in TOPICS.items() if pattern.search(text)}


# any Triton file -------------------------------------------------------------------------------------------------


@dataclass
class Launched:
    """One @triton.jit kernel and the numbers its launches pass as literals."""

    name: str
    constexprs: list[str]
    values: dict[str, int] = field(default_factory=dict)  # literal values, the same at every launch
    loops: bool = False


def launched_kernels(source: str) -> list[Launched]:
    """The file's jit kernels with the literal constexpr and launch-option values at their launches."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    kernels: dict[str, Launched] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            constexprs = [a.arg for a in node.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)]
            loops = any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(node))
            kernels[node.name] = Launched(node.name, constexprs, loops=loops)
    seen: dict[str, dict[str, set[int]]] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript) and isinstance(call.func.value, ast.Name)):
            continue
        kernel = kernels.get(call.func.value.id)
        if kernel is None:
            continue
        values = seen.setdefault(kernel.name, {})
        for keyword in call.keywords:
            if keyword.arg in (*kernel.constexprs, *LAUNCH) and isinstance(keyword.value, ast.Constant) \
                    and isinstance(keyword.value.value, int) and not isinstance(keyword.value.value, bool):
                values.setdefault(keyword.arg, set()).add(keyword.value.value)
    for name, values in seen.items():
        kernels[name].values = {k: next(iter(v)) for k, v in values.items() if len(v) == 1}
    return [k for k in kernels.values() if k.name in seen]


def honour_bounds(source: str, bounds: tuple[Bound, ...]) -> tuple[str, list[str], list[str]]:
    """The source with every launch value that breaks a bound set to the nearest power of two that keeps all the
    bounds on that name; the changes made, and the bounds no launch could take (no such parameter, or a value the
    launch computes)."""
    changes, cannot = [], []
    for name in dict.fromkeys(b.name for b in bounds):
        on = tuple(b for b in bounds if b.name == name)
        said = " and ".join(b.text() for b in on)
        touched = False
        for kernel in launched_kernels(source):
            if name not in kernel.constexprs and name not in LAUNCH:
                continue
            touched = True
            current = kernel.values.get(name, 4 if name == "num_warps" else None)
            if current is None:
                cannot.append(f"{said}: {kernel.name}'s launch computes {name}, so no rule sets it")
                continue
            if all(b.holds(current) for b in on):
                continue
            value = _satisfying(on, current)
            if value is None:
                cannot.append(f"{said}: no value satisfies them all")
                continue
            try:
                source = bake_config(source, kernel.name, {name: value})
            except RewriteError as error:
                cannot.append(f"{said}: {error}")
                continue
            changes.append(f"{kernel.name} launches with {name}={value} (was {current})")
        if not touched:
            cannot.append(f"{said}: no kernel in this file has a parameter {name}")
    return source, changes, cannot


def _satisfying(bounds: tuple[Bound, ...], current: int) -> int | None:
    exact = [b.value for b in bounds if b.op in ("=", "==")]
    ladder = exact or [1 << k for k in range(0, 14)]
    fits = [v for v in ladder if all(b.holds(v) for b in bounds)]
    return min(fits, key=lambda v: (abs(v - current), v)) if fits else None


def keeps(bounds: tuple[Bound, ...], name: str, values: tuple[int, ...]) -> tuple[int, ...]:
    """The values of tunable `name` that every bound on it allows."""
    return tuple(v for v in values if all(b.holds(v) for b in bounds if b.name == name))


def ladder(kernel: Launched) -> list[tuple[str, tuple[int, ...]]]:
    """Values worth searching for a kernel no template describes: each literal block size halved and doubled
    (powers of two), num_warps 2-8, num_stages 2-4 where the kernel loops."""
    pairs: list[tuple[str, tuple[int, ...]]] = []
    for name in kernel.constexprs:
        value = kernel.values.get(name)
        if value is None or value < 1 or value & (value - 1):
            continue  # computed, or not a power of two: a size, not a block
        pairs.append((name, tuple(sorted({max(1, value // 2), value, value * 2, value * 4}))))
    pairs.append(("num_warps", tuple(sorted({2, 4, 8, kernel.values.get("num_warps", 4)}))))
    if kernel.loops:
        pairs.append(("num_stages", tuple(sorted({2, 3, 4, kernel.values.get("num_stages", 3)}))))
    return pairs
