"""Strategies on synthetic landscapes, measured by the scripted evaluator: quality, budgets, no repeats."""

from __future__ import annotations

import math

import pytest

from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.scripted import FakeClock, ScriptedEvaluator
from pipeline.tuning.space import Config, PowerOfTwo, Space
from pipeline.tuning.strategy import STRATEGIES, Budget, Effort, History, Strategy, make_strategy

from tests.tuning.landscapes import LANDSCAPES, bowl, gemm

SEARCHERS = ("random", "pattern", "surrogate")
SEEDS = (0, 1, 2)


def true_ratio(landscape, result) -> float:
    return landscape.cost(result.best.config) / landscape.optimum_ms()


def test_every_strategy_is_registered_by_name():
    assert set(STRATEGIES) >= {"exhaustive", "random", "pattern", "surrogate"}
    with pytest.raises(ValueError, match="unknown strategy 'annealing'"):
        make_strategy("annealing")


@pytest.mark.parametrize("name", sorted(LANDSCAPES))
def test_exhaustive_measures_every_valid_config_once_and_finds_the_optimum(name):
    landscape = LANDSCAPES[name]()
    evaluator = ScriptedEvaluator(landscape.cost)
    result = make_strategy("exhaustive").run(landscape.space, evaluator, Budget())
    assert result.evaluations == landscape.space.size() == len(evaluator.calls)
    assert max(evaluator.calls.values()) == 1
    assert result.best.score == pytest.approx(landscape.optimum_ms())
    assert result.stop_reason == "converged"


@pytest.mark.parametrize("name", sorted(LANDSCAPES))
@pytest.mark.parametrize("strategy", ["pattern", "surrogate"])
def test_guided_strategies_come_within_3_percent_with_a_quarter_of_the_evaluations(name, strategy):
    landscape = LANDSCAPES[name]()
    quarter = landscape.space.size() // 4
    for seed in SEEDS:
        evaluator = ScriptedEvaluator(landscape.cost, noise=0.01, seed=seed)
        result = make_strategy(strategy, seed=seed).run(landscape.space, evaluator, Budget(max_evals=quarter))
        assert true_ratio(landscape, result) <= 1.03, (seed, result.best)
        assert result.evaluations <= quarter
        assert max(evaluator.calls.values()) == 1


def test_guided_strategies_stop_by_themselves_well_inside_the_budget_on_the_bowl():
    landscape = bowl()
    for strategy in ("pattern", "surrogate"):
        result = make_strategy(strategy).run(landscape.space, ScriptedEvaluator(landscape.cost), Budget(max_evals=10_000))
        assert result.stop_reason == "converged"
        assert result.evaluations <= landscape.space.size() // 6
        assert true_ratio(landscape, result) == 1.0


def test_random_search_comes_within_3_percent_with_half_the_space():
    landscape = gemm()
    for seed in SEEDS:
        result = make_strategy("random", seed=seed).run(landscape.space, ScriptedEvaluator(landscape.cost), Budget(max_evals=landscape.space.size() // 2))
        assert true_ratio(landscape, result) <= 1.03


@pytest.mark.parametrize("strategy", ["exhaustive", *SEARCHERS])
def test_the_evaluation_budget_is_never_exceeded(strategy):
    landscape = gemm()
    evaluator = ScriptedEvaluator(landscape.cost)
    result = make_strategy(strategy).run(landscape.space, evaluator, Budget(max_evals=7))
    assert result.evaluations == evaluator.evaluations == 7
    assert result.stop_reason == "max_evals"


@pytest.mark.parametrize("strategy", ["exhaustive", *SEARCHERS])
def test_the_time_budget_stops_the_search(strategy):
    landscape = bowl()
    clock = FakeClock()
    evaluator = ScriptedEvaluator(landscape.cost, clock=clock, seconds_per_eval=0.5)
    result = make_strategy(strategy).run(landscape.space, evaluator, Budget(max_seconds=10.0), clock=clock)
    assert result.stop_reason == "max_seconds"
    # A batch begun before the deadline is finished: at most one batch past it.
    assert 20 <= result.evaluations <= 20 + max(len(b) for b in evaluator.batches)
    assert result.wall_s == clock.now_s


@pytest.mark.parametrize("strategy", SEARCHERS)
def test_a_small_space_is_searched_to_the_end_without_repeats(strategy):
    space = Space((PowerOfTwo("A", 1, 8), PowerOfTwo("B", 1, 4)))
    evaluator = ScriptedEvaluator(lambda c: 1.0 + (c["A"] - 4) ** 2 + c["B"])
    result = make_strategy(strategy, max_restarts=None).run(space, evaluator, Budget()) if strategy == "pattern" else \
        make_strategy(strategy).run(space, evaluator, Budget())
    assert max(evaluator.calls.values()) == 1
    assert result.best.config == Config(A=4, B=1)


def test_failed_configs_are_data_and_never_win():
    space = Space((PowerOfTwo("A", 1, 64),))

    def cost(config):
        return TuneStatus.MISMATCH if config["A"] == 8 else 1.0 + abs(math.log2(config["A"]) - 3)

    for strategy in ("exhaustive", *SEARCHERS):
        result = make_strategy(strategy).run(space, ScriptedEvaluator(cost), Budget())
        assert result.best.config["A"] in (4, 16)
        assert any(t.status is TuneStatus.MISMATCH for t in result.trials) or strategy == "random"


class Repeater(Strategy):
    """Proposes the same config forever (and an invalid one): the loop must not measure either twice."""

    name = "repeater_for_tests"

    def propose(self, history: History) -> list[Config]:
        return [Config(A=2), Config(A=2), Config(A=3)]


def test_the_loop_drops_repeats_and_invalid_configs_whatever_a_strategy_proposes():
    space = Space((PowerOfTwo("A", 1, 4),))
    evaluator = ScriptedEvaluator(lambda c: float(c["A"]))
    result = Repeater().run(space, evaluator, Budget())
    assert dict(evaluator.calls) == {Config(A=2).key: 1}
    assert result.stop_reason == "converged"
    STRATEGIES.pop("repeater_for_tests")


def test_an_evaluator_answering_for_other_configs_is_an_error():
    class Liar:
        def evaluate(self, configs):
            return [Measurement(Config(A=1), TuneStatus.OK, 1.0) for _ in configs]

    with pytest.raises(RuntimeError, match="other configurations"):
        make_strategy("exhaustive").run(Space((PowerOfTwo("A", 1, 4),)), Liar(), Budget())


def test_effort_presets_are_frozen_and_size_the_budget():
    assert Effort.named("quick") is Effort.quick and Effort.full.trials > Effort.quick.trials
    assert Effort.quick.budget(100) == Budget(max_evals=15, max_seconds=Effort.quick.max_seconds)
    assert Effort.quick.budget(10).max_evals == Effort.quick.min_evals
    assert Effort.full.budget(10_000).max_evals == Effort.full.max_evals
    with pytest.raises(Exception):
        Effort.quick.trials = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        Effort.named("heroic")
    with pytest.raises(ValueError):
        Budget(max_evals=0)
