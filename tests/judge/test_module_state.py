"""A batch norm in training updates its running statistics, which a user's `model.eval()` reads later: red team
20's c10 and c19 got the outputs right and left the statistics as constructed, and passed every check, since only
outputs were compared. The buffers the reference's first call changes are compared with the candidate's after its
first call, by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.expert.lowering import Lowering
from pipeline.expert.seeds import alternatives
from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
RED20 = ROOT / "tests" / "fixtures" / "redteam20"
TINY = ROOT / "data" / "problems" / "tiny"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", other_shapes=False)) as judge:
        yield judge


@pytest.mark.parametrize(("name", "problem"), [("c10_bn_no_running_stats.py", "level1/10_BatchNorm2d_Train.py"),
                                               ("c19_linear_bn_defaults.py", "level2/11_Linear_BatchNorm1d_ReLU.py")])
def test_a_kernel_that_leaves_the_running_statistics_as_constructed_fails(judge, name, problem):
    result = judge.evaluate(load_problem(TINY / problem), load_candidate(RED20 / name))
    assert result.status is Status.MISMATCH and result.reason.startswith("module_state:") and "running_mean" in result.reason, result.reason


def test_the_experts_batch_norm_updates_them_as_torch_does(judge, tmp_path):
    path = TINY / "level1" / "10_BatchNorm2d_Train.py"
    seeds, notes = alternatives(Lowering.of(path.read_text()))
    assert seeds, notes
    (tmp_path / "seed.py").write_text(seeds[0].lowered.source)
    result = judge.evaluate(load_problem(path), load_candidate(tmp_path / "seed.py"))
    assert result.status is Status.OK, result.reason
    assert any(c.name == "module_state" and c.passed for c in result.checks), result.checks


def test_a_problem_whose_calls_change_no_buffer_asks_no_state(judge):
    result = judge.evaluate(load_problem(TINY / "level1" / "23_Softmax.py"), load_candidate(RED20 / "h01_softmax_online_chunked.py"))
    assert result.status is Status.OK and "module_state" not in {c.name for c in result.checks}, result.reason
