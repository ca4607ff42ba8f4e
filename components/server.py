"""The web app's server: Streamlit's own (`st.App`, served by uvicorn), with egg's host check in front of it.

`egg ui` runs `python -c "from components.server import main; main()" APP PORT ADDRESS`: `st.App` is Streamlit's
supported way to add ASGI middleware, and `App.run()` started from `-c` anchors Streamlit's config and paths on
app.py itself, as `streamlit run app.py` does. The allowed host names come from EGG_ALLOWED_HOSTS (set by `egg ui`).
"""

from __future__ import annotations

import sys

import streamlit as st
from starlette.middleware import Middleware

from pipeline.sessions.app import STREAMLIT_CONFIG
from pipeline.sessions.hostcheck import HostGuard, HostPolicy


def guarded_app(script: str, policy: HostPolicy) -> st.App:
    """app.py as an ASGI app whose every request (websocket included) passes the host check first."""
    return st.App(script, middleware=[Middleware(HostGuard, policy=policy)])


def main(argv: list[str] | None = None) -> None:
    script, port, address = (sys.argv[1:] if argv is None else argv)[:3]
    # app.py navigates with st.navigation, but until its first run has called it, Streamlit takes the folder named
    # pages/ beside it for an old-style multipage app: a fresh server's first visitor arriving on a deep link
    # (/bench) got that page run alone, under a sidebar listing every file of pages/. The flag st.navigation
    # itself clears, cleared before the first run.
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    app = guarded_app(script, HostPolicy.from_environment())
    app.run(config={**STREAMLIT_CONFIG, "server.address": address, "server.port": int(port)})
