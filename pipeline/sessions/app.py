"""Where the web app's files are, and the command that serves them (`egg ui`, `make app`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pipeline

# Streamlit's own settings for egg: never phone home, no developer toolbar, no file watcher in a served app, and a
# log of what needs attention (warnings and errors; Streamlit's info lines, such as a live fragment's timer landing
# during a full rerun, which it drops by design, are not).
STREAMLIT_CONFIG = {
    "logger.level": "warning",
    "server.headless": True,
    "browser.gatherUsageStats": False,
    "client.toolbarMode": "minimal",
    "server.fileWatcherType": "none",
    "server.runOnSave": False,
}
# components/server.py builds app.py into Streamlit's st.App with the host check as middleware, and runs it.
SERVE_CODE = "from components.server import main; main()"


def app_file() -> Path | None:
    """app.py of a checkout, or of an installed egg (its data files, under sys.prefix/share/egg)."""
    for folder in (pipeline.ROOT, Path(sys.prefix) / "share" / "egg"):
        if (folder / "app.py").is_file() and (folder / "pages").is_dir():
            return folder / "app.py"
    return None


def serve_command(script: Path, port: int, address: str = "127.0.0.1") -> list[str]:
    """The process that serves the app: Streamlit's server with egg's host check (allowed names: EGG_ALLOWED_HOSTS)."""
    return [sys.executable, "-c", SERVE_CODE, str(script), str(port), address]
