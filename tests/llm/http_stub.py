"""Loopback HTTP stubs for the LLM tests: a server that rate-limits then forwards, one that never answers.

A module of its own (not conftest) so tests can import the actions.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Action = Callable[[BaseHTTPRequestHandler, bytes], None]


def rate_limited(retry_after: str = "1") -> Action:
    """Answer 429 with a Retry-After header, as OpenAI does."""

    def act(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        payload = b'{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}'
        _send(handler, 429, payload, {"Retry-After": retry_after})

    return act


def forward_to(root: str) -> Action:
    """Pass the request on to a real server at `root` and relay its answer."""

    def act(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = urllib.request.Request(
            root + handler.path, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            _send(handler, reply.status, reply.read(), {})

    return act


def silent_for(seconds: float) -> Action:
    """Accept the request and say nothing for `seconds` (then hang up)."""

    def act(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        time.sleep(seconds)

    return act


def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str]) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(payload)


class StubServer(ThreadingHTTPServer):
    """Plays `actions` in order, then repeats the last one. `requests` logs (path, time) of each POST."""

    daemon_threads = True

    def __init__(self, actions: list[Action]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.actions = list(actions)
        self.requests: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_action(self, path: str) -> Action:
        with self.lock:
            self.requests.append((path, time.monotonic()))
            return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


class _Handler(BaseHTTPRequestHandler):
    server: StubServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.next_action(self.path)(self, body)

    def log_message(self, format: str, *args: object) -> None:
        pass
