"""The JSON form of a space, as an agent declares it: typed models that give both the schema and the parser.

`SpaceSpec.model_json_schema()` is what a model is shown; `parse_space_spec(data)` reads its reply into a `Space`,
strictly: unknown keys, strings where numbers belong, bad ranges and constraints over unknown names are errors
whose message names the offending field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from pipeline.tuning.space import Choice, Config, Constraint, IntRange, Param, PowerOfTwo, Space, SpaceError

_NAME = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="a constexpr parameter or num_warps/num_stages")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class PowerOfTwoSpec(_Strict):
    """Powers of two from lo to hi inclusive (tile sizes, warps)."""

    kind: Literal["power_of_two"]
    name: Annotated[str, _NAME]
    lo: StrictInt
    hi: StrictInt


class IntRangeSpec(_Strict):
    """Integers lo, lo + step, ..., hi (pipeline stages)."""

    kind: Literal["int_range"]
    name: Annotated[str, _NAME]
    lo: StrictInt
    hi: StrictInt
    step: StrictInt = 1


class ChoiceSpec(_Strict):
    """One of the listed values (program-id layouts, flags, small sets of sizes)."""

    kind: Literal["choice"]
    name: Annotated[str, _NAME]
    values: list[Union[StrictBool, StrictInt, StrictFloat, StrictStr]] = Field(min_length=1)


class ConstraintSpec(_Strict):
    """A named condition every configuration must meet, e.g. "BLOCK_M * BLOCK_N <= 16384"."""

    name: Annotated[str, _NAME]
    expr: str = Field(description="arithmetic, comparisons, and/or/not, min/max/cdiv over parameter names")


ParamSpec = Annotated[Union[PowerOfTwoSpec, IntRangeSpec, ChoiceSpec], Field(discriminator="kind")]


class SpaceSpec(_Strict):
    """A tuning space: parameters, constraints between them, and optionally the current (default) config."""

    params: list[ParamSpec] = Field(min_length=1)
    constraints: list[ConstraintSpec] = []
    default: dict[str, Union[StrictBool, StrictInt, StrictFloat, StrictStr]] | None = None


def parse_space_spec(data: Mapping[str, Any]) -> Space:
    """Validate `data` as a `SpaceSpec` and build the `Space`; every fault becomes one `SpaceError`."""
    try:
        spec = SpaceSpec.model_validate(dict(data) if isinstance(data, Mapping) else data)
    except ValidationError as exc:
        raise SpaceError("invalid space: " + "; ".join(_describe(e) for e in exc.errors())) from None
    params = tuple(_param(i, p) for i, p in enumerate(spec.params))
    names = [p.name for p in params]
    constraints = tuple(_constraint(i, c, names) for i, c in enumerate(spec.constraints))
    return Space(params, constraints, Config(spec.default) if spec.default is not None else None)


def _describe(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}"


def _param(index: int, spec: PowerOfTwoSpec | IntRangeSpec | ChoiceSpec) -> Param:
    try:
        if isinstance(spec, PowerOfTwoSpec):
            return PowerOfTwo(spec.name, spec.lo, spec.hi)
        if isinstance(spec, IntRangeSpec):
            return IntRange(spec.name, spec.lo, spec.hi, spec.step)
        return Choice(spec.name, tuple(spec.values))
    except SpaceError as exc:
        raise SpaceError(f"params.{index}: {exc}") from None


def _constraint(index: int, spec: ConstraintSpec, names: list[str]) -> Constraint:
    try:
        return Constraint.expr(spec.name, spec.expr, names)
    except SpaceError as exc:
        raise SpaceError(f"constraints.{index}: {exc}") from None
