"""Where the web app's files are, and the command that serves them (`egg ui`, `make app`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pipeline

# Streamlit's own settings for egg: never phone home, no developer toolbar, no file watcher in a served app.
STREAMLIT_FLAGS = (
    "--server.headless", "true",
    "--browser.gatherUsageStats", "false",
    "--client.toolbarMode", "minimal",
    "--server.fileWatcherType", "none",
    "--server.runOnSave", "false",
)


def app_file() -> Path | None:
    """app.py of a checkout, or of an installed egg (its data files, under sys.prefix/share/egg)."""
    for folder in (pipeline.ROOT, Path(sys.prefix) / "share" / "egg"):
        if (folder / "app.py").is_file() and (folder / "pages").is_dir():
            return folder / "app.py"
    return None


def streamlit_command(script: Path, port: int, address: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(script), "--server.address", address, "--server.port", str(port), *STREAMLIT_FLAGS]
