"""The web app under AppTest: a temporary database, real worker processes on the CPU, a scripted model."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pipeline import api
from pipeline.sessions.backends import BackendSpec
from pipeline.stages.method import Budget
from tests.ui.scripted import DIAGNOSIS, write_script  # noqa: F401 (DIAGNOSIS: the tests import it from here)

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
@pytest.fixture
def script(tmp_path) -> Path:
    return write_script(tmp_path / "script.yaml")


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "egg.sqlite"
    monkeypatch.setenv("EGG_DB", str(path))
    return path


@pytest.fixture
def app(db) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at


def rerun_until(at: AppTest, done: Callable[[AppTest], bool], timeout_s: float = 240, what: str = "") -> AppTest:
    """Rerun the page (as its live fragment would) until `done` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if done(at):
            return at
        time.sleep(0.3)
    raise AssertionError(f"the page never showed {what or done} in {timeout_s} s: headers {[h.value for h in at.header]}, errors {[e.value for e in at.error]}")


def header(at: AppTest) -> str:
    return at.header[0].value if at.header else ""


def finished_session(db: Path, script: Path, review: str = "auto", **budget) -> str:
    """A session run to its end by a real worker (mode auto: nobody is asked)."""
    store = api.open_store(db)
    record = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("script", str(script)), review=review, device="cpu",
                                budget=Budget(**{"seeds": 2, "rounds": 1, "debug_rounds": 0, **budget}))
    api.start_worker(store, record.id)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if store.session(record.id).finished:
            assert store.session(record.id).status == "done", store.session(record.id).error
            return record.id
        time.sleep(0.3)
    raise AssertionError("the session did not finish")


@pytest.fixture(autouse=True)
def main_module_restored():
    """Streamlit's script runner leaves its script as this process's __main__; a later test in the same process
    whose pool starts processes by spawn (the tuning pruner's) would have each child re-run that script."""
    main = sys.modules.get("__main__")
    yield
    sys.modules["__main__"] = main
