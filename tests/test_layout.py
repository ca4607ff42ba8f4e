"""The user's layout, and which `pipeline` egg's processes import."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pipeline
from pipeline.judge.sandbox import clean_environment

ROOT = Path(__file__).resolve().parent.parent


def test_the_top_level_is_the_users_layout():
    for name in ("pyproject.toml", "app.py", "pages", "pipeline", "components", "data", "tests"):
        assert (ROOT / name).exists(), name
    assert not (ROOT / "src").exists()
    assert sorted((ROOT / "data" / "problems").iterdir())  # the bundled problems live in data/


def test_packages_are_declared_explicitly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["pipeline*", "components*"]
    assert project["project"]["name"] == "egg"
    assert project["project"]["scripts"]["egg"] == "pipeline.cli:main"


def _foreign_pipeline(tmp_path: Path) -> Path:
    """A `pipeline` package that is not egg's (django-pipeline installs one by that name)."""
    folder = tmp_path / "foreign" / "pipeline"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("FOREIGN = True\n")
    return folder.parent


def test_child_processes_import_this_repositorys_pipeline_first(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(_foreign_pipeline(tmp_path)))
    env = clean_environment("cpu")
    out = subprocess.run([sys.executable, "-c", "import pipeline; print(pipeline.ROOT)"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(ROOT)


def test_a_process_started_for_this_engine_refuses_another_copy_of_it(tmp_path):
    copy = tmp_path / "copy" / "pipeline"
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text((ROOT / "pipeline" / "__init__.py").read_text())
    env = {**os.environ, "PYTHONPATH": str(copy.parent), "EGG_PIPELINE_ROOT": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "import pipeline"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0
    assert f"imported another `pipeline` from {copy.parent}" in out.stderr


def test_the_tests_run_this_repositorys_engine():
    assert pipeline.ROOT == ROOT
