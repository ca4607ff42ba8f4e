"""Shared fixtures. LLM: a real llama.cpp `llama-server` with Gemma 3 270M, built by `make llm-server`."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pipeline

# Fail the whole run, loudly, when the tests would exercise some other `pipeline` than this repository's.
REPO = Path(__file__).resolve().parent.parent
if pipeline.ROOT != REPO:
    raise RuntimeError(f"the tests imported `pipeline` from {pipeline.ROOT}, not from this repository ({REPO})")


def _llama_paths() -> dict[str, str]:
    return _LLAMA_PATHS


def _read_llama_paths() -> dict[str, str]:
    # The build script is the one place that knows where the binary and model live.
    script = Path(__file__).resolve().parent.parent / "scripts" / "llama_server.sh"
    output = subprocess.run(["bash", str(script), "--paths"], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


# Read once, before any test points EGG_CACHE at a temporary folder of its own (the judge's and the expert's tests
# do, for their caches): the server and the model stay where `make llm-server` put them.
_LLAMA_PATHS = _read_llama_paths()


@dataclass
class LlamaServer:
    """A running llama-server; `url` is its OpenAI base URL (…/v1), `root` the bare origin."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_llama_server(*, context: int = 8192, parallel: int = 4, ready_timeout_s: float = 120) -> LlamaServer:
    """Start llama-server on a free loopback port and wait for GET /health; fail (never skip) if it is missing."""
    paths = _llama_paths()
    binary, model = Path(paths["EGG_LLAMA_SERVER"]), Path(paths["EGG_LLAMA_MODEL"])
    if not binary.is_file() or not model.is_file():
        pytest.fail(f"llama-server or its model is missing ({binary}, {model}): run `make llm-server`")
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    # One thread: on a small shared VM, OpenMP's spinning threads slowed decoding ten-fold.
    command = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(context),
        "--parallel",
        str(parallel),
        "--threads",
        "1",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(process, port, log_path)
    _wait_healthy(server, ready_timeout_s)
    return server


def _wait_healthy(server: LlamaServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"llama-server exited with {server.process.returncode}:\n{_tail(server.log_path)}")
        try:
            with urllib.request.urlopen(f"{server.root}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    pytest.fail(f"llama-server not healthy after {timeout_s} s:\n{_tail(server.log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One llama-server for the whole session (4 parallel slots)."""
    server = start_llama_server()
    yield server
    server.stop()


@pytest.fixture
def llama_server_factory() -> Iterator[Callable[..., LlamaServer]]:
    """Start private llama-servers (e.g. to kill one); each is stopped at the end of the test."""
    started: list[LlamaServer] = []

    def start(**options: int) -> LlamaServer:
        server = start_llama_server(**options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# The files that take longest (serial durations, session 17), first: under `make test`'s two workers (pytest -n 2
# --dist loadfile) a long file collected last would run alone at the end, the other worker idle.
LONGEST_FIRST = ("bench/test_bench.py", "sessions/test_person_drives.py", "stages/test_optimize.py", "sessions/test_real_model.py",
                 "ui/test_pages.py", "judge/test_refcache.py", "expert/test_h200_compile.py", "sessions/test_one_worker.py",
                 "browser/test_app_in_chromium.py", "browser/test_steering_in_chromium.py", "tuning/test_strategy.py",
                 "profiler/test_survey.py", "expert/test_backend.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].removeprefix("tests/"), len(rank)))
