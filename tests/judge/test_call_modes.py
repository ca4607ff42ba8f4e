"""A user calls a model in eval mode and with gradients on, and the judge called only in training mode under
`torch.no_grad()`: red team 20's c06 (wrong only after `model.eval()`) and c07 (wrong only with gradients on) passed
every check. The reference's first run finds which modes give its own answers; each check calls the candidate so on
one set each. A problem whose answers change with the mode (batch norm in training) is never called in eval mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
RED20 = ROOT / "tests" / "fixtures" / "redteam20"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu", other_shapes=False)) as judge:
        yield judge


@pytest.mark.parametrize(("name", "says"), [("c06_swish_evalmode.py", "model.eval()"), ("c07_swish_gradmode.py", "gradients on")])
def test_a_kernel_wrong_only_in_a_users_mode_fails_there(judge, name, says):
    result = judge.evaluate(load_problem(TINY / "15_Swish.py"), load_candidate(RED20 / name))
    assert result.status is Status.MISMATCH and result.reason.startswith("correctness:") and says in result.reason, result.reason


def test_the_modes_a_problem_is_called_in_are_those_that_keep_its_answers(judge):
    assert judge.reference(load_problem(TINY / "15_Swish.py")).result["modes"] == ["eval", "grad"]
    # batch norm in training mode normalises by the batch, in eval mode by its running statistics
    assert judge.reference(load_problem(TINY / "10_BatchNorm2d_Train.py")).result["modes"] == ["grad"]


def test_an_honest_kernel_passes_called_in_every_mode(judge):
    result = judge.evaluate(load_problem(TINY / "23_Softmax.py"), load_candidate(RED20 / "h01_softmax_online_chunked.py"))
    assert result.status is Status.OK, result.reason
