"""Spaces: typed parameters, constraints, enumeration, neighbours, sampling, keys, and the two ways to read one."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from pipeline.tuning.expression import Expression, ExpressionError
from pipeline.tuning.space import Choice, Config, Constraint, IntRange, PowerOfTwo, Space, SpaceError, constexpr_names
from pipeline.tuning.spec import SpaceSpec

ROOT = Path(__file__).resolve().parents[2]


def gemm_space() -> Space:
    return Space(
        (PowerOfTwo("BLOCK_M", 16, 128), PowerOfTwo("BLOCK_N", 16, 128), IntRange("num_stages", 2, 4), Choice("layout", ("row", "grouped"))),
        (Constraint.expr("tile", "BLOCK_M * BLOCK_N <= 2048"),),
    )


def test_parameters_list_their_values():
    assert PowerOfTwo("B", 16, 256).values() == (16, 32, 64, 128, 256)
    assert IntRange("s", 1, 7, 2).values() == (1, 3, 5, 7)
    assert Choice("c", ("a", "b")).values() == ("a", "b")


@pytest.mark.parametrize("make", [lambda: PowerOfTwo("B", 16, 48), lambda: PowerOfTwo("B", 64, 16), lambda: IntRange("s", 3, 1),
                                  lambda: IntRange("s", 1, 3, 0), lambda: Choice("c", ()), lambda: Choice("c", (1, 1))])
def test_bad_parameters_are_refused(make):
    with pytest.raises(SpaceError):
        make()


def test_enumeration_keeps_only_configs_that_meet_the_constraints():
    space = gemm_space()
    configs = list(space.configs())
    assert space.unconstrained_size == 4 * 4 * 3 * 2
    assert len(configs) == space.size() == 10 * 3 * 2  # 10 of the 16 tile pairs have BLOCK_M * BLOCK_N <= 2048
    assert all(c["BLOCK_M"] * c["BLOCK_N"] <= 2048 for c in configs)
    assert len(set(configs)) == len(configs)


def test_violations_name_the_problem():
    space = gemm_space()
    assert space.violations(Config(BLOCK_M=128, BLOCK_N=128, num_stages=2, layout="row")) == ["violates tile (BLOCK_M * BLOCK_N <= 2048)"]
    problems = space.violations(Config(BLOCK_M=48, BLOCK_N=16, num_stages=2, extra=1))
    assert "missing layout" in problems and "unknown parameter extra" in problems
    assert any("BLOCK_M=48" in p for p in problems)


def test_config_key_is_canonical_and_hashable():
    a = Config(BLOCK_M=64, num_warps=4)
    b = Config({"num_warps": 4, "BLOCK_M": 64})
    assert a == b and hash(a) == hash(b) and a.key == b.key == '{"BLOCK_M":64,"num_warps":4}'
    assert Config.from_key(a.key) == a
    assert Config(X=1).key != Config(X="1").key
    assert a.constexprs() == {"BLOCK_M": 64} and a.launch_options() == {"num_warps": 4}


def test_neighbours_halve_and_double_powers_of_two_and_respect_constraints():
    space = gemm_space()
    config = Config(BLOCK_M=32, BLOCK_N=64, num_stages=2, layout="row")
    found = set(space.neighbours(config))
    assert Config(BLOCK_M=16, BLOCK_N=64, num_stages=2, layout="row") in found
    assert Config(BLOCK_M=32, BLOCK_N=32, num_stages=2, layout="row") in found
    assert Config(BLOCK_M=64, BLOCK_N=64, num_stages=2, layout="row") not in found  # 64 * 64 > 2048
    assert Config(BLOCK_M=32, BLOCK_N=128, num_stages=2, layout="row") not in found
    assert Config(BLOCK_M=32, BLOCK_N=64, num_stages=3, layout="row") in found
    assert Config(BLOCK_M=32, BLOCK_N=64, num_stages=2, layout="grouped") in found
    assert not any(c["num_stages"] == 1 for c in found)
    wide = set(space.neighbours(config, 2))
    assert wide == {Config(BLOCK_M=32, BLOCK_N=16, num_stages=2, layout="row"), Config(BLOCK_M=32, BLOCK_N=64, num_stages=4, layout="row")}


def test_sampling_is_seeded_distinct_valid_and_honours_exclusions():
    space = gemm_space()
    first = space.sample(random.Random(3), 12)
    assert first == space.sample(random.Random(3), 12)
    assert len(set(first)) == 12 and all(space.is_valid(c) for c in first)
    rest = space.sample(random.Random(0), 1000, exclude=lambda c: c in first)
    assert len(rest) == space.size() - 12 and not set(rest) & set(first)


def test_coordinates_put_configs_in_the_unit_cube_with_categories_one_hot():
    space = gemm_space()
    assert space.coordinates(Config(BLOCK_M=16, BLOCK_N=128, num_stages=3, layout="grouped")) == (0.0, 1.0, 0.5, 0.0, 1.0)


def test_a_default_outside_the_space_is_refused():
    with pytest.raises(SpaceError, match="default config"):
        Space((PowerOfTwo("B", 16, 64),), default=Config(B=128))


def test_expressions_allow_arithmetic_and_refuse_everything_else():
    assert Expression.parse("cdiv(M, BLOCK) * 2 <= max(4, M)").evaluate({"M": 10, "BLOCK": 4}) is True
    assert Expression.parse("(a, b if a > 1 else 0)").evaluate({"a": 2, "b": 5}) == (2, 5)
    for text in ("__import__('os')", "a.b", "open('x')", "[x for x in y]", "lambda: 1", "'s' * 3", "f(x=1)"):
        with pytest.raises(ExpressionError):
            Expression.parse(text)
    with pytest.raises(ExpressionError, match="unknown name"):
        Expression.parse("BLOCK_Q < 2", ["BLOCK_M"])


# An agent's declared space -----------------------------------------------------------------------------------------

SPEC = {
    "params": [
        {"kind": "power_of_two", "name": "BLOCK_M", "lo": 16, "hi": 128},
        {"kind": "int_range", "name": "num_stages", "lo": 2, "hi": 4, "step": 1},
        {"kind": "choice", "name": "GROUP_M", "values": [1, 8]},
    ],
    "constraints": [{"name": "smem", "expr": "BLOCK_M * 128 * 4 * num_stages <= 232448"}],
    "default": {"BLOCK_M": 64, "num_stages": 3, "GROUP_M": 8},
}


def test_a_declared_space_is_read_and_round_trips():
    space = Space.from_spec(SPEC)
    assert space.names == ("BLOCK_M", "num_stages", "GROUP_M")
    assert space.default == Config(BLOCK_M=64, num_stages=3, GROUP_M=8)
    assert all(c["BLOCK_M"] * 512 * c["num_stages"] <= 232448 for c in space.configs())
    again = Space.from_spec(space.to_spec())
    assert list(again.configs()) == list(space.configs())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(extra=1), "extra: Extra inputs are not permitted"),
        (lambda s: s["params"][0].update(lo="16"), "params.0.power_of_two.lo"),
        (lambda s: s["params"][0].update(lo=24), "params.0: BLOCK_M: lo and hi must be powers of two"),
        (lambda s: s["params"][1].update(kind="range"), "params.1"),
        (lambda s: s["params"][2].update(values=[]), "params.2.choice.values"),
        (lambda s: s["params"].append({"kind": "choice", "name": "GROUP_M", "values": [2]}), "named more than once"),
        (lambda s: s["constraints"][0].update(expr="BLOCK_Q < 3"), "constraints.0: constraint 'smem': unknown name 'BLOCK_Q'"),
        (lambda s: s["constraints"][0].update(expr="__import__('os')"), "constraints.0"),
        (lambda s: s["default"].update(BLOCK_M=256), "default config"),
        (lambda s: s.update(params=[]), "params: List should have at least 1 item"),
    ],
)
def test_a_declared_space_is_checked_strictly(change, message):
    import copy

    spec = copy.deepcopy(SPEC)
    change(spec)
    with pytest.raises(SpaceError) as caught:
        Space.from_spec(spec)
    assert message in str(caught.value)


def test_the_schema_shown_to_an_agent_comes_from_the_parser_type():
    schema = SpaceSpec.model_json_schema()
    assert set(schema["properties"]) == {"params", "constraints", "default"}
    assert schema["additionalProperties"] is False


# A space read from a kernel ------------------------------------------------------------------------------------------


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"space_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_space_is_read_from_a_kernels_constexprs_and_launch_options():
    module = load(ROOT / "examples" / "candidates" / "matmul_triton.py")
    assert constexpr_names(module.matmul_kernel) == ["BLOCK_M", "BLOCK_N", "BLOCK_K"]
    space = Space.from_kernel(module.matmul_kernel, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32})
    assert space.names == ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    assert space.param("BLOCK_M") == PowerOfTwo("BLOCK_M", 16, 256)
    assert space.default == Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)


def test_reading_a_kernel_keeps_flags_fixed_and_follows_tune():
    module = load(ROOT / "tests" / "fixtures" / "audit" / "autotuned_matmul.py")  # autotune + heuristics around the jit
    values = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "EVEN_K": True, "num_warps": 8}
    space = Space.from_kernel(module.matmul_kernel, values)
    assert "EVEN_K" not in space.names and space.default["num_warps"] == 8
    narrow = Space.from_kernel(module.matmul_kernel, values, tune=["BLOCK_K", "num_warps"])
    assert narrow.names == ("BLOCK_K", "num_warps")
    with pytest.raises(SpaceError, match="not constexpr"):
        Space.from_kernel(module.matmul_kernel, values, tune=["M"])
    with pytest.raises(SpaceError, match="no value for constexpr BLOCK_N"):
        Space.from_kernel(module.matmul_kernel, {"BLOCK_M": 64})


def test_a_sample_launch_is_recorded_without_running_and_becomes_the_default():
    import torch

    from pipeline.tuning.space import launch_values

    module = load(ROOT / "examples" / "candidates" / "matmul_triton.py")
    a, b = torch.zeros(1024, 64), torch.zeros(64, 1024)  # CPU tensors: the launch is recorded, never run
    values = launch_values(module.matmul_kernel, lambda: module.matmul(a, b))
    assert values == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}
    space = Space.from_kernel(module.matmul_kernel, values)
    assert space.default == Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    autotuned = load(ROOT / "tests" / "fixtures" / "audit" / "autotuned_matmul.py")
    seen = launch_values(autotuned.matmul_kernel, lambda: autotuned.ModelNew()(a, b))
    assert seen["BLOCK_M"] == 64 and seen["num_warps"] == 4  # the autotuner's first config
    with pytest.raises(SpaceError, match="was not launched"):
        launch_values(module.matmul_kernel, lambda: None)
