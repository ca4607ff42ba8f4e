"""LLM test fixtures that need no model: loopback stub servers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from tests.llm.http_stub import Action, StubServer


@pytest.fixture
def stub_server() -> Iterator[Callable[[list[Action]], StubServer]]:
    """Start loopback stub servers; each is shut down at the end of the test."""
    servers: list[StubServer] = []

    def start(actions: list[Action]) -> StubServer:
        server = StubServer(actions)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
