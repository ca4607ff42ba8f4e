"""Parameter spaces: typed parameters, named constraints between them, and the configurations they admit.

A space is built from three kinds of parameter (`PowerOfTwo`, `IntRange`, `Choice`), like Helion's autotuner, plus
constraints: small named predicates over a configuration. It can be declared in code, read from a kernel
(`Space.from_kernel`), or read from an agent's JSON reply (`Space.from_spec`, which validates strictly).

Standard library only: the measurement worker and the orchestrator both read configurations.
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

from pipeline.tuning.expression import Expression, ExpressionError

Value = Union[int, float, str, bool]
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Past this many unconstrained combinations the valid configurations are sampled, not listed.
ENUMERATION_LIMIT = 200_000


class SpaceError(ValueError):
    """A space or configuration that cannot be used; the message names the offending part."""


class Config(Mapping[str, Value]):
    """One point of a space: an immutable, hashable mapping from parameter name to value."""

    __slots__ = ("_items", "_values")

    def __init__(self, values: Mapping[str, Value] | None = None, **kwargs: Value) -> None:
        merged = {**(values or {}), **kwargs}
        self._items = tuple(sorted(merged.items()))
        self._values = dict(self._items)

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"Config({', '.join(f'{k}={v!r}' for k, v in self._items)})"

    @property
    def key(self) -> str:
        """Canonical text: the same configuration always gives the same key (sorted names, JSON values)."""
        return json.dumps(dict(self._items), separators=(",", ":"))

    def replace(self, **changes: Value) -> Config:
        return Config({**self._values, **changes})

    def constexprs(self) -> dict[str, Value]:
        """The kernel's compile-time parameters (everything but the launch options)."""
        return {k: v for k, v in self._items if k not in LAUNCH_OPTIONS}

    def launch_options(self) -> dict[str, Value]:
        return {k: v for k, v in self._items if k in LAUNCH_OPTIONS}

    @classmethod
    def from_key(cls, key: str) -> Config:
        return cls(json.loads(key))


# Parameters -------------------------------------------------------------------------------------------------------


def _is_power_of_two(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PowerOfTwo:
    """Powers of two from `lo` to `hi` inclusive. Neighbours halve and double."""

    name: str
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not (_is_power_of_two(self.lo) and _is_power_of_two(self.hi)):
            raise SpaceError(f"{self.name}: lo and hi must be powers of two, got {self.lo!r}, {self.hi!r}")
        if self.lo > self.hi:
            raise SpaceError(f"{self.name}: lo {self.lo} > hi {self.hi}")

    def values(self) -> tuple[int, ...]:
        return tuple(1 << e for e in range(self.lo.bit_length() - 1, self.hi.bit_length()))

    def contains(self, value: object) -> bool:
        return _is_power_of_two(value) and self.lo <= value <= self.hi

    def step(self, value: Value, steps: int) -> Value | None:
        moved = value << steps if steps >= 0 else value >> -steps
        return moved if self.contains(moved) else None

    def position(self, value: Value) -> tuple[float, ...]:
        span = self.hi.bit_length() - self.lo.bit_length()
        return ((value.bit_length() - self.lo.bit_length()) / span if span else 0.0,)

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "power_of_two", "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True)
class IntRange:
    """Integers lo, lo + step, ... up to hi inclusive. Neighbours are one step away."""

    name: str
    lo: int
    hi: int
    step_size: int = 1

    def __post_init__(self) -> None:
        if not (_is_int(self.lo) and _is_int(self.hi) and _is_int(self.step_size)):
            raise SpaceError(f"{self.name}: lo, hi and step must be integers")
        if self.step_size < 1 or self.lo > self.hi:
            raise SpaceError(f"{self.name}: need lo <= hi and step >= 1, got lo={self.lo}, hi={self.hi}, step={self.step_size}")

    def values(self) -> tuple[int, ...]:
        return tuple(range(self.lo, self.hi + 1, self.step_size))

    def contains(self, value: object) -> bool:
        return _is_int(value) and self.lo <= value <= self.hi and (value - self.lo) % self.step_size == 0

    def step(self, value: Value, steps: int) -> Value | None:
        moved = value + steps * self.step_size
        return moved if self.contains(moved) else None

    def position(self, value: Value) -> tuple[float, ...]:
        return ((value - self.lo) / (self.hi - self.lo) if self.hi > self.lo else 0.0,)

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "int_range", "lo": self.lo, "hi": self.hi, "step": self.step_size}


@dataclass(frozen=True)
class Choice:
    """One of a listed set of values. Numeric choices are ordered (neighbours are adjacent in the list);
    other choices are categories (every other value is a neighbour)."""

    name: str
    options: tuple[Value, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        if not self.options:
            raise SpaceError(f"{self.name}: a choice needs at least one value")
        if len(set(map(json.dumps, self.options))) != len(self.options):
            raise SpaceError(f"{self.name}: repeated values in {list(self.options)}")
        if not all(isinstance(v, (int, float, str, bool)) for v in self.options):
            raise SpaceError(f"{self.name}: values must be numbers, strings or booleans, got {list(self.options)}")

    @property
    def ordered(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.options)

    def values(self) -> tuple[Value, ...]:
        return self.options

    def contains(self, value: object) -> bool:
        return any(type(value) is type(v) and value == v for v in self.options)

    def step(self, value: Value, steps: int) -> Value | None:
        index = self.options.index(value) + steps
        return self.options[index] if 0 <= index < len(self.options) else None

    def position(self, value: Value) -> tuple[float, ...]:
        index = self.options.index(value)
        if self.ordered:
            return (index / (len(self.options) - 1) if len(self.options) > 1 else 0.0,)
        return tuple(1.0 if i == index else 0.0 for i in range(len(self.options)))

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "choice", "values": list(self.options)}


Param = Union[PowerOfTwo, IntRange, Choice]


@dataclass(frozen=True)
class Constraint:
    """A named predicate that every configuration of a space must satisfy."""

    name: str
    check: Callable[[Mapping[str, Value]], bool] = field(compare=False)
    text: str = ""  # the expression, when the constraint was declared as one

    @classmethod
    def expr(cls, name: str, text: str, names: Sequence[str] | None = None) -> Constraint:
        """A constraint from an arithmetic/boolean expression over parameter names, e.g.
        `(BLOCK_M + BLOCK_N) * BLOCK_K * 4 * num_stages <= 232448`."""
        try:
            expression = Expression.parse(text, names)
        except ExpressionError as exc:
            raise SpaceError(f"constraint {name!r}: {exc}") from None
        return cls(name, lambda config: bool(expression.evaluate(config)), text)


# The space --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    """Typed parameters, constraints between them, and an optional default (the kernel's current config)."""

    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...] = ()
    default: Config | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        names = [p.name for p in self.params]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise SpaceError(f"parameters named more than once: {repeated}")
        if not self.params:
            raise SpaceError("a space needs at least one parameter")
        if self.default is not None:
            object.__setattr__(self, "default", Config(self.default))
            problems = self.violations(self.default)
            if problems:
                raise SpaceError(f"the default config {self.default} is not in the space: {'; '.join(problems)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def unconstrained_size(self) -> int:
        size = 1
        for p in self.params:
            size *= len(p.values())
        return size

    def violations(self, config: Mapping[str, Value]) -> list[str]:
        """Why `config` is not a point of this space (empty when it is)."""
        problems = [f"missing {n}" for n in self.names if n not in config]
        problems += [f"unknown parameter {n}" for n in config if n not in self.names]
        problems += [f"{p.name}={config[p.name]!r} is not in {p.to_spec()}" for p in self.params if p.name in config and not p.contains(config[p.name])]
        if problems:
            return problems
        return [f"violates {c.name}" + (f" ({c.text})" if c.text else "") for c in self.constraints if not c.check(config)]

    def is_valid(self, config: Mapping[str, Value]) -> bool:
        return not self.violations(config)

    def _satisfies(self, config: Config) -> bool:
        return all(c.check(config) for c in self.constraints)

    def configs(self) -> Iterator[Config]:
        """Every valid configuration, in a fixed order (the product of the parameters' values)."""
        for values in itertools.product(*(p.values() for p in self.params)):
            config = Config(dict(zip(self.names, values)))
            if self._satisfies(config):
                yield config

    @cached_property
    def _listed(self) -> tuple[Config, ...] | None:
        return tuple(self.configs()) if self.unconstrained_size <= ENUMERATION_LIMIT else None

    def size(self) -> int:
        """The number of valid configurations (counted only when the space is small enough to list)."""
        if self._listed is None:
            raise SpaceError(f"the space has {self.unconstrained_size} combinations: too many to count")
        return len(self._listed)

    def neighbours(self, config: Config, distance: int = 1) -> list[Config]:
        """Valid configurations that differ from `config` in one parameter, moved `distance` steps either way
        (a power of two halves/doubles per step; a categorical choice moves to any other value at distance 1)."""
        found: list[Config] = []
        for p in self.params:
            value = config[p.name]
            if isinstance(p, Choice) and not p.ordered:
                moves = [v for v in p.options if v != value] if distance == 1 else []
            else:
                moves = [m for m in (p.step(value, -distance), p.step(value, distance)) if m is not None]
            found += [c for c in (config.replace(**{p.name: m}) for m in moves) if self._satisfies(c)]
        return found

    def sample(self, rng: random.Random, count: int, exclude: Callable[[Config], bool] = lambda c: False) -> list[Config]:
        """Up to `count` distinct valid configurations chosen at random, skipping those `exclude` names."""
        if self._listed is not None:
            pool = [c for c in self._listed if not exclude(c)]
            return rng.sample(pool, min(count, len(pool)))
        found: dict[Config, None] = {}
        for _ in range(count * 1000):
            config = Config({p.name: rng.choice(p.values()) for p in self.params})
            if self._satisfies(config) and not exclude(config):
                found[config] = None
                if len(found) == count:
                    break
        return list(found)

    def coordinates(self, config: Config) -> tuple[float, ...]:
        """The config as a point of the unit cube (one coordinate per ordered parameter, one-hot for categories)."""
        return tuple(x for p in self.params for x in p.position(config[p.name]))

    # Reading and writing spaces -----------------------------------------------------------------------------------

    def to_spec(self) -> dict[str, Any]:
        """The JSON form `from_spec` reads (constraints written in code have no text and are left out)."""
        spec: dict[str, Any] = {
            "params": [p.to_spec() for p in self.params],
            "constraints": [{"name": c.name, "expr": c.text} for c in self.constraints if c.text],
        }
        if self.default is not None:
            spec["default"] = dict(self.default)
        return spec

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Space:
        """A space declared as JSON data (by an agent). Strict: unknown keys, wrong types and bad ranges are errors.

        `{"params": [{"name": "BLOCK_M", "kind": "power_of_two", "lo": 16, "hi": 256},
                     {"name": "num_stages", "kind": "int_range", "lo": 2, "hi": 5, "step": 1},
                     {"name": "GROUP_M", "kind": "choice", "values": [1, 8]}],
          "constraints": [{"name": "smem", "expr": "BLOCK_M * BLOCK_K * 4 * num_stages <= 232448"}],
          "default": {"BLOCK_M": 64, ...}}`  (constraints and default are optional)
        """
        from pipeline.tuning.spec import parse_space_spec

        return parse_space_spec(spec)

    @classmethod
    def from_kernel(
        cls,
        kernel: Any,
        values: Mapping[str, Value],
        *,
        tune: Sequence[str] | None = None,
        num_warps: PowerOfTwo | None = PowerOfTwo("num_warps", 2, 16),
        num_stages: IntRange | None = IntRange("num_stages", 1, 5),
    ) -> Space:
        """A space around a kernel's current launch: its `tl.constexpr` parameters plus num_warps/num_stages.

        `values` holds the constexpr values (and launch options) of a sample launch (see `launch_values`).
        Each power-of-two constexpr (or every name in `tune`) ranges over a quarter to four times its current
        value; other constexprs (flags, dtypes, odd sizes) stay fixed unless named in `tune`. The default config
        is the current launch, so a search can start from the kernel as it is.
        """
        names = constexpr_names(kernel)
        unknown = sorted(set(tune or ()) - set(names) - set(LAUNCH_OPTIONS))
        if unknown:
            raise SpaceError(f"tune names {unknown}, which are not constexpr parameters of the kernel ({names})")
        params: list[Param] = []
        for name in names:
            if name not in values:
                raise SpaceError(f"no value for constexpr {name} in the sample launch")
            if (tune is None and _is_power_of_two(values[name])) or (tune is not None and name in tune):
                params.append(_param_around(name, values[name]))
        for option, default in (("num_warps", num_warps), ("num_stages", num_stages)):
            if default is not None and (tune is None or option in tune):
                params.append(default)
        current = {p.name: values.get(p.name) for p in params}
        for option, fallback in (("num_warps", 4), ("num_stages", 3)):
            if option in current and current[option] is None:
                current[option] = fallback
        space = cls(tuple(params))
        return cls(tuple(params), default=Config(current)) if space.is_valid(current) else space


def _param_around(name: str, value: Value) -> Param:
    if _is_power_of_two(value):
        return PowerOfTwo(name, max(1, value >> 2), value << 2)
    if isinstance(value, bool):
        return Choice(name, (False, True))
    if _is_int(value):
        return IntRange(name, max(1, value // 2), value * 2)
    raise SpaceError(f"cannot build a range around {name}={value!r}: declare it with Choice")


def constexpr_names(kernel: Any) -> list[str]:
    """The `tl.constexpr` parameter names of a Triton kernel (jitted, interpreted, autotuned or heuristic)."""
    fn = kernel
    while hasattr(fn, "fn"):  # Autotuner -> Heuristics -> JITFunction/InterpretedFunction -> python function
        fn = fn.fn
    if not callable(fn):
        raise SpaceError(f"{kernel!r} is not a Triton kernel")
    names = []
    for param in inspect.signature(fn).parameters.values():
        annotation = param.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
        if text.split(".")[-1] == "constexpr":
            names.append(param.name)
    return names


def launch_values(kernel: Any, call: Callable[[], object]) -> dict[str, Value]:
    """The constexpr values and launch options of the first launch of `kernel` made while `call()` runs.

    Launches are recorded, not executed (so this works on any device, CPU tensors included, and the call's
    outputs are meaningless). An autotuned kernel reports its autotuner's first configuration.
    """
    target, first_config = kernel, {}
    if hasattr(kernel, "configs"):  # an Autotuner: record at its level (tuning would need a GPU)
        config = kernel.configs[0]
        first_config = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    else:
        while hasattr(getattr(target, "fn", None), "run"):  # Heuristics -> the jitted function
            target = target.fn
    names, wanted = list(target.arg_names), set(constexpr_names(kernel))
    seen: list[dict[str, Value]] = []

    def record(*args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
        if not seen:
            bound = {**dict(zip(names, args)), **kwargs, **first_config}
            seen.append({k: v for k, v in bound.items() if k in wanted or k in LAUNCH_OPTIONS})

    target.run = record  # an instance attribute: `kernel[grid](...)` and every wrapper call `.run`
    try:
        call()
    finally:
        del target.run
    if not seen:
        raise SpaceError(f"{getattr(target, '__name__', target)!r} was not launched by the call")
    return seen[0]
