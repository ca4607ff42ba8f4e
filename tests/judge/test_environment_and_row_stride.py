"""Held-out red team 20 (session 28; tests/fixtures/redteam20, README.md the table): a kernel that told the judge's
sandbox from a user's machine by its environment and one that took the row stride to be the row length passed. A
candidate now reads only Triton's own switches from its environment (the static audit), and the judge asks for a set
whose rows are longer in memory than they are (a column slice of a wider tensor). CPU, Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.judge import Judge
from pipeline.judge.audit import audit_file, audit_source
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "redteam20"
TINY = ROOT / "data" / "problems" / "tiny" / "level1"


@pytest.mark.parametrize("source", [
    'import os\nos.environ.setdefault("TRITON_PRINT_AUTOTUNING", "0")\n',
    'import os\nos.environ["TRITON_INTERPRET"] = "1"\n',
    'import os\nDEBUG = os.environ.get("TRITON_DEBUG", "0") == "1"\n',
    'import os\nON = "TRITON_INTERPRET" in os.environ\n',
    'import os\nON = os.getenv("TRITON_INTERPRET")\n',
    'from os import environ\nON = environ["TRITON_INTERPRET"]\n',
])
def test_reading_or_setting_tritons_own_switches_is_no_finding(source):
    assert audit_source(source) == ()


@pytest.mark.parametrize("source, shown", [
    ('import os\nJUDGED = os.environ.get("USER") == "egg-sandbox"\n', "the environment variable USER"),
    ('import os\nJUDGED = "EGG_JOB_MEMORY_BYTES" in os.environ\n', "the environment variable EGG_JOB_MEMORY_BYTES"),
    ('from os import environ\nHOME = environ["HOME"]\n', "the environment variable HOME"),
    ('import os\nKEY = "HO" + "ME"\nHOME = os.getenv(KEY)\n', "the environment by a computed name or in bulk"),
    ('import os\nENV = os.environ\nJUDGED = ENV.get("TRITON_HOME")\n', "the environment by a computed name or in bulk"),
    ('import os\nNAMES = [k for k in os.environ if k.startswith("EGG")]\n', "the environment by a computed name or in bulk"),
])
def test_reading_any_other_variable_is_a_finding(source, shown):
    findings = audit_source(source)
    assert findings and findings[0].rule == "dynamic_code" and findings[0].message.startswith(f"reads {shown}:"), findings


def test_red_team_20s_environment_detector_is_refused_by_the_audit():
    findings = audit_file(FIXTURES / "c17_swish_env_detect.py")
    assert findings and findings[0].rule == "dynamic_code" and "reads the environment variable" in findings[0].message, findings


@pytest.fixture(scope="module")
def judge():
    with Judge(EvalOptions(device="cpu")) as judge:
        yield judge


def test_a_kernel_that_takes_the_row_stride_to_be_the_row_length_fails_on_a_column_slice(judge):
    result = judge.evaluate(load_problem(TINY / "23_Softmax.py"), load_candidate(FIXTURES / "c05_softmax_rowslice.py"))
    assert result.status is Status.MISMATCH and "rows are 3 elements longer in memory" in result.reason, result.reason


@pytest.mark.parametrize("name, problem", [("h01_softmax_online_chunked.py", "23_Softmax.py"), ("h02_argmax_nan_aware.py", "14_Argmax_Dim1.py")])
def test_red_team_20s_honest_kernels_pass(judge, name, problem):
    result = judge.evaluate(load_problem(TINY / problem), load_candidate(FIXTURES / name))
    assert (result.status, result.generality) == (Status.OK, "general"), result.reason

