"""The acceptance on CPU, for every problem of the tiny suite: the expert's first seed passes the real judge (fewer
trials than `egg check`), and every seed it offers is a Triton candidate the delegation rule would not ban. The
whole `egg optimize` on each problem with `egg check` after it (`bench/expert_h200.py --device cpu --problems tiny
--mode optimize --check`, see its docstring) takes ~15 minutes; one runs in tests/expert/test_optimize_expert.py."""

from __future__ import annotations

import pytest

from pipeline.expert.lowering import Lowering
from pipeline.expert.seeds import alternatives
from pipeline.types import Status
from tests.expert.judging import CPU, Judge, judge_source, verdict_text
from tests.expert.problems import TINY, label


@pytest.fixture(scope="module")
def judge():
    with Judge(CPU) as judge:
        yield judge


@pytest.mark.parametrize("path", TINY, ids=label)
def test_the_first_seed_of_every_tiny_problem_passes_the_judge(judge, tmp_path, path):
    lowering = Lowering.of(path.read_text())
    seeds, notes = alternatives(lowering)
    assert seeds, notes
    for choice in seeds:
        assert "@triton.jit" in choice.lowered.source and not lowering.delegates(choice.lowered)
    result = judge_source(judge, path, seeds[0].lowered.source, tmp_path, "seed1")
    assert result.status is Status.OK, verdict_text(result)
