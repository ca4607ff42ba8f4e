"""A launch recipe: how to call one kernel of a file with a configuration, declared as data.

The measurement worker and the CPU compiler both read it, so it is plain JSON: tensor arguments by shape, dtype
and how to fill them (and whether the kernel writes them), scalar arguments as numbers or as expressions over
earlier scalars, the grid as an expression over scalars and the configuration, and fixed constexprs.

    LaunchRecipe(
        kernel="matmul_kernel",
        args={"a_ptr": TensorSpec((4096, 4096)), "b_ptr": TensorSpec((4096, 4096)),
              "c_ptr": TensorSpec((4096, 4096), init="empty", output=True),
              "M": 4096, "N": 4096, "K": 4096, "stride_am": "K", "stride_ak": 1, ...},
        grid="(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))",
    )

Standard library only at import; `materialize` imports torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from pipeline.tuning.expression import Expression, ExpressionError

INITS = ("randn", "rand", "zeros", "ones", "empty")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "bool")


class RecipeError(ValueError):
    """A recipe that cannot describe a launch."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument. `output=True`: the kernel writes it (it is poisoned before and compared after a call)."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    init: str = "randn"
    output: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.dtype not in DTYPES:
            raise RecipeError(f"unknown dtype {self.dtype!r}; use one of {DTYPES}")
        if self.init not in INITS:
            raise RecipeError(f"unknown init {self.init!r}; use one of {INITS}")
        if not all(isinstance(n, int) and n >= 0 for n in self.shape):
            raise RecipeError(f"a shape holds non-negative integers, got {self.shape}")

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "init": self.init, "output": self.output}


Arg = Union[TensorSpec, int, float, str]  # str: an expression over earlier scalar arguments


@dataclass(frozen=True)
class LaunchRecipe:
    """One kernel launch, by the kernel's runtime parameter names (in the kernel's order)."""

    kernel: str
    args: Mapping[str, Arg]
    grid: str
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", dict(self.args))
        object.__setattr__(self, "constexprs", dict(self.constexprs))
        known: list[str] = []
        for name, arg in self.args.items():
            if isinstance(arg, str):
                _parse(f"args[{name!r}]", arg, known)
            if not isinstance(arg, TensorSpec):
                known.append(name)
        _parse("grid", self.grid, None)
        if not any(isinstance(a, TensorSpec) and a.output for a in self.args.values()):
            raise RecipeError("no tensor argument is marked output=True: there would be nothing to check")

    def scalars(self) -> dict[str, int | float]:
        """The scalar arguments, expressions resolved in order."""
        values: dict[str, int | float] = {}
        for name, arg in self.args.items():
            if isinstance(arg, str):
                values[name] = Expression.parse(arg).evaluate(values)
            elif not isinstance(arg, TensorSpec):
                values[name] = arg
        return values

    def grid_for(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """The launch grid for a configuration."""
        grid = Expression.parse(self.grid).evaluate({**self.scalars(), **self.constexprs, **config})
        grid = grid if isinstance(grid, tuple) else (grid,)
        if not grid or not all(isinstance(g, int) and g >= 1 for g in grid):
            raise RecipeError(f"grid {self.grid!r} gave {grid} for {dict(config)}")
        return grid

    def outputs(self) -> list[str]:
        return [n for n, a in self.args.items() if isinstance(a, TensorSpec) and a.output]

    def signature(self) -> str:
        """A digest of everything about the launch but the configuration (the cache's shape signature)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "args": {n: a.to_json() if isinstance(a, TensorSpec) else a for n, a in self.args.items()},
            "grid": self.grid,
            "constexprs": dict(self.constexprs),
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchRecipe:
        args = {n: TensorSpec(**a) if isinstance(a, dict) else a for n, a in data["args"].items()}
        return cls(data["kernel"], args, data["grid"], data.get("constexprs", {}), data.get("seed", 0))


def _parse(where: str, text: str, names: list[str] | None) -> Expression:
    try:
        return Expression.parse(text, names)
    except ExpressionError as exc:
        raise RecipeError(f"{where}: {exc}") from None


def materialize(recipe: LaunchRecipe, device: Any, *, small: bool = False) -> dict[str, Any]:
    """The runtime arguments as values: tensors filled from the recipe's seed on `device`, scalars resolved.

    `small=True` makes every tensor 16 elements (for compiling only: the code depends on dtypes, scalars and
    pointer alignment, not on how much memory lies behind a pointer).
    """
    import torch

    generator = torch.Generator(device=device).manual_seed(recipe.seed)
    scalars = recipe.scalars()
    values: dict[str, Any] = {}
    for name, arg in recipe.args.items():
        if isinstance(arg, TensorSpec):
            shape = (16,) if small else arg.shape
            values[name] = _tensor(torch, shape, getattr(torch, arg.dtype), arg.init, device, generator)
        else:
            values[name] = scalars[name]
    return values


def _tensor(torch: Any, shape: tuple[int, ...], dtype: Any, init: str, device: Any, generator: Any) -> Any:
    if init in ("zeros", "empty"):
        return torch.zeros(shape, dtype=dtype, device=device)
    if init == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if not dtype.is_floating_point:
        return torch.randint(0, 8, shape, dtype=dtype, device=device, generator=generator)
    fill = torch.randn if init == "randn" else torch.rand
    return fill(shape, dtype=torch.float32, device=device, generator=generator).to(dtype)
