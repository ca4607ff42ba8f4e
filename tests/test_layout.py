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


# Where egg may start a process, and why. A process that imports a problem or a candidate starts only through the
# judge's sandbox (pipeline.judge.launcher, or the judge's fork server); anything new must be added here with its
# reason, or go through the launcher.
PROCESS_STARTERS = {
    "pipeline/judge/launcher.py": "the launcher: user code in the judge's sandbox",
    "pipeline/judge/jail.py": "becomes the launched module once inside the sandbox",
    "pipeline/judge/sandbox.py": "the judge's fork server (its children isolate themselves before any user code)",
    "pipeline/judge/forkserver.py": "forks the judge's jobs, which isolate themselves first",
    "pipeline/judge/isolation.py": "the PID namespace's init and its job",
    "pipeline/api.py": "a session's worker: egg's engine, which runs no user code itself",
    "pipeline/cli.py": "egg ui becomes Streamlit's server",
    "pipeline/profiler/ceilings.py": "nvidia-smi",
    "pipeline/profiler/static.py": "Triton's ptxas and cuobjdump on a compiled binary",
    # NCU and its target (the profiler's driver) run through the launcher; NCU's export of the report it wrote
    # there runs here, and runs no user code.
    "pipeline/profiler/ncu.py": "NCU's --import of a kept report (NCU's own parser, no user code)",
}
_STARTS = {"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
           "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "os.system", "os.popen", "pty.fork", "pty.spawn"}
_STARTS_PREFIXES = ("os.exec", "os.spawn", "multiprocessing.", "concurrent.futures.ProcessPoolExecutor")


def _process_starts(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            parts = []
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name):
                dotted = ".".join([aliases.get(node.id, node.id), *reversed(parts)])
                if dotted in _STARTS or dotted.startswith(_STARTS_PREFIXES):
                    found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: {dotted}")
    return found


def test_no_module_outside_the_known_ones_starts_a_process():
    """A new place that starts a process is either the launcher's business or named above with its reason."""
    files = [ROOT / "app.py", *(ROOT / "pipeline").rglob("*.py"), *(ROOT / "components").rglob("*.py"), *(ROOT / "pages").glob("*.py")]
    unknown = [hit for path in files if str(path.relative_to(ROOT)) not in PROCESS_STARTERS
               and path.name != "audit.py" for hit in _process_starts(path)]
    assert unknown == [], unknown
    assert all((ROOT / name).exists() and _process_starts(ROOT / name) for name in PROCESS_STARTERS), "a listed module starts no process any more"
