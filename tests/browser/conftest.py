"""A real browser on the real server: `egg ui` (what `make app` runs) on a temporary database, driven by Debian's
Chromium through Playwright. Missing Chromium is a failure, not a skip: CI installs it (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port

CHROMIUM = Path(os.environ.get("EGG_CHROMIUM", "/usr/bin/chromium"))
# As root on a closed network: no sandbox, and none of the background connections Chromium would try.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SCREENSHOTS = Path(os.environ.get("EGG_SCREENSHOTS", Path(__file__).resolve().parents[2] / "docs" / "screenshots"))


@dataclass
class Server:
    url: str
    db: Path
    process: subprocess.Popen
    log: Path


@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
    port = free_port()
    db, log = tmp_path / "egg.sqlite", tmp_path / "server.log"
    env = {**os.environ, "EGG_DB": str(db), "EGG_PORT": str(port)}
    env.pop("EGG_LLM", None)
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "ui"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=tmp_path, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.read() == b"ok":
                    break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"egg ui did not answer /_stcore/health in 60 s:\n{log.read_text()[-3000:]}")
    yield Server(url, db, process, log)
    os.killpg(process.pid, 15)
    process.wait(timeout=20)
    # the app's log stays clean while a person uses it: no traceback, no warning (a stale fragment, a closed socket)
    lines = log.read_text(errors="replace").splitlines()
    noisy = [n for n, line in enumerate(lines)
             if any(word in line for word in ("Traceback", "WARNING", "Warning", "ERROR", "does not exist anymore", "Exception"))]
    assert not noisy, "egg ui logged:\n" + "\n".join(lines[noisy[0]:noisy[0] + 60])  # the first with what follows it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _explain_failure(page, server: Server, tmp_path: Path) -> None:
    """What a failed browser test saw: the page's text, a screenshot beside the test's files, the server's log."""
    try:
        page.screenshot(path=str(tmp_path / "failure.png"))
        text = page.locator("[data-testid=stMain]").inner_text(timeout=5_000)
    except Exception as error:  # the browser itself may be what failed
        text = f"(page unreadable: {error})"
    print(f"--- page text at failure ---\n{text[-3000:]}\n--- screenshot: {tmp_path / 'failure.png'}")
    print(f"--- egg ui log ---\n{server.log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def page(server, request, tmp_path):
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: install Debian's chromium (apt-get install chromium), as .ci/run does")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        yield page
        call = getattr(request.node, "report_call", None)
        if call is not None and call.failed:
            _explain_failure(page, server, tmp_path)
        context.close()
        browser.close()
