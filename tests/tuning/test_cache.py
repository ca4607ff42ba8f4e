"""The SQLite measurement cache: keys, scopes, which outcomes last, and the caching evaluator."""

from __future__ import annotations

import sqlite3

from pipeline.tuning.cache import CachedEvaluator, CacheScope, TuningCache, default_path, fingerprint
from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.scripted import ScriptedEvaluator
from pipeline.tuning.space import Config, PowerOfTwo, Space
from pipeline.tuning.strategy import Budget, make_strategy

SCOPE = CacheScope.of("def kernel(): pass", "shapes-1", {"gpu": "H200", "triton": "3.6.0"})


def test_the_cache_file_lives_under_egg_cache(tmp_path):
    assert default_path({"EGG_CACHE": str(tmp_path)}) == tmp_path / "tuning.sqlite"
    assert str(default_path({})).endswith(".cache/egg/tuning.sqlite")


def test_outcomes_round_trip_by_config_key(tmp_path):
    with TuningCache(tmp_path / "t.sqlite") as cache:
        a, b = Config(BLOCK=64, num_warps=4), Config(BLOCK=128, num_warps=4)
        stored = cache.put(SCOPE, [Measurement(a, TuneStatus.OK, 1.5, trials=30), Measurement(b, TuneStatus.MISMATCH, detail="differs")])
        assert stored == 2
        found = cache.get(SCOPE, [Config(num_warps=4, BLOCK=64), b, Config(BLOCK=32, num_warps=4)])
    assert set(found) == {a.key, b.key}
    assert found[a.key] == Measurement(a, TuneStatus.OK, 1.5, trials=30, measured=False)
    assert found[b.key].status is TuneStatus.MISMATCH and found[b.key].detail == "differs"


def test_each_part_of_the_scope_separates_entries(tmp_path):
    config = Config(BLOCK=64)
    with TuningCache(tmp_path / "t.sqlite") as cache:
        cache.put(SCOPE, [Measurement(config, TuneStatus.OK, 1.0)])
        others = [
            CacheScope.of("def kernel(): return", "shapes-1", {"gpu": "H200", "triton": "3.6.0"}),
            CacheScope.of("def kernel(): pass", "shapes-2", {"gpu": "H200", "triton": "3.6.0"}),
            CacheScope.of("def kernel(): pass", "shapes-1", {"gpu": "H100", "triton": "3.6.0"}),
        ]
        assert all(cache.get(scope, [config]) == {} for scope in others)
        assert cache.get(SCOPE, [config])


def test_passing_failures_and_untimed_results_are_not_kept(tmp_path):
    configs = [Config(B=i) for i in range(4)]
    outcomes = [
        Measurement(configs[0], TuneStatus.TIMEOUT),
        Measurement(configs[1], TuneStatus.RUNTIME_ERROR, detail="worker died"),
        Measurement(configs[2], TuneStatus.OK, None, detail="timing skipped"),
        Measurement(configs[3], TuneStatus.SPILLS, measured=False),
    ]
    with TuningCache(tmp_path / "t.sqlite") as cache:
        assert cache.put(SCOPE, outcomes) == 1
        assert list(cache.get(SCOPE, configs)) == [configs[3].key]


def test_migrations_run_once_and_the_file_is_shared(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningCache(path) as first:
        first.put(SCOPE, [Measurement(Config(B=1), TuneStatus.OK, 2.0)])
    with TuningCache(path) as second:
        assert second.get(SCOPE, [Config(B=1)])
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1


def test_fingerprints_ignore_key_order():
    assert fingerprint({"a": "1", "b": "2"}) == fingerprint({"b": "2", "a": "1"}) != fingerprint({"a": "1"})


def test_a_second_search_is_answered_from_the_cache(tmp_path):
    space = Space((PowerOfTwo("A", 1, 64), PowerOfTwo("B", 1, 8)))
    device = ScriptedEvaluator(lambda c: 1.0 + abs(c["A"] - 16) + c["B"])
    with TuningCache(tmp_path / "t.sqlite") as cache:
        first = make_strategy("exhaustive").run(space, CachedEvaluator(device, cache, SCOPE), Budget())
        again = CachedEvaluator(device, cache, SCOPE)
        second = make_strategy("exhaustive").run(space, again, Budget())
    assert first.evaluations == space.size() and second.evaluations == 0
    assert again.hits == space.size() and max(device.calls.values()) == 1
    assert second.best.config == first.best.config and second.best.time_ms == first.best.time_ms
