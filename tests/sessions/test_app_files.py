"""`egg ui` finds the web app in a checkout and in an installed egg (its entry and pages travel as data files)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pipeline
from pipeline.sessions import app as app_files

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_the_app_and_its_pages(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("egg-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n}
    pages = {p.name for p in (ROOT / "pages").glob("*.py")}
    assert data == {"share/egg/app.py"} | {f"share/egg/pages/{p}" for p in pages}
    assert "components/verdict.py" in names and "pipeline/api.py" in names and not any(n.startswith("tests/") for n in names)


def test_an_installed_egg_serves_the_app_from_its_data_files(tmp_path, monkeypatch):
    share = tmp_path / "prefix" / "share" / "egg"
    (share / "pages").mkdir(parents=True)
    (share / "app.py").write_text("")
    monkeypatch.setattr(pipeline, "ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    assert app_files.app_file() == share / "app.py"
    command = app_files.serve_command(share / "app.py", 8600)
    assert command[1:3] == ["-c", app_files.SERVE_CODE] and command[3:] == [str(share / "app.py"), "8600", "127.0.0.1"]
    config = app_files.STREAMLIT_CONFIG
    assert config["browser.gatherUsageStats"] is False and config["client.toolbarMode"] == "minimal" and config["server.headless"] is True

def test_a_checkout_serves_its_own_app():
    assert app_files.app_file() == ROOT / "app.py"
