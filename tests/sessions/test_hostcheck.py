"""The web app answers only to its own host: the check itself, and a real `egg ui` asked with raw HTTP and websocket
requests under a foreign Host (DNS rebinding) and under its own."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from pipeline.sessions.hostcheck import HostGuard, HostPolicy, host_name, is_loopback, parse_hosts
from tests.conftest import free_port


def test_only_loopback_names_and_allowed_ones_pass_the_host_check():
    policy = HostPolicy(parse_hosts("egg.lan, Lab.Example.org."))
    for good in ("127.0.0.1:8501", "localhost:8501", "LOCALHOST", "[::1]:8501", "egg.lan:8501", "lab.example.org"):
        assert policy.allows(good), good
    for bad in ("evil.example:8501", "127.0.0.1.evil.example", "localhost.evil.example:8501", "egg.lan.evil.example", "", None,
                "[::2]:8501", "10.0.0.1:8501"):
        assert not policy.allows(bad), bad
    assert not HostPolicy().allows("egg.lan:8501")
    assert host_name("[::1]:8501") == "::1" and host_name("Example.ORG.:80") == "example.org"
    assert HostPolicy.from_environment({"EGG_ALLOWED_HOSTS": "a.example b.example"}).allowed == {"a.example", "b.example"}


def test_a_listening_address_is_loopback_only_for_this_machine():
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(a) for a in ("0.0.0.0", "::", "192.168.1.5", "egg.lan"))


class WebSocketDisconnect(Exception):  # named as Starlette's: the guard matches by name, importing neither server
    pass


def test_an_error_after_the_client_left_is_the_connections_end_and_any_other_is_raised():
    """A closed tab or a reload ends a connection with an error inside the app; the guard keeps that out of the log as
    a traceback, and raises every error from a connection whose client is still there."""
    def app_raising(error: BaseException, read_first: bool):
        async def app(scope, receive, send):
            if read_first:
                await receive()
            raise error
        return app

    def run(app, first_message: dict, kind: str = "websocket") -> None:
        async def receive():
            return first_message

        async def send(message):
            pass

        scope = {"type": kind, "headers": [(b"host", b"127.0.0.1:8501")]}
        asyncio.run(HostGuard(app, HostPolicy())(scope, receive, send))

    run(app_raising(RuntimeError("send after close"), True), {"type": "websocket.disconnect", "code": 1001})
    run(app_raising(RuntimeError("response after close"), True), {"type": "http.disconnect"}, kind="http")
    run(app_raising(WebSocketDisconnect(), False), {"type": "websocket.connect"})
    with pytest.raises(RuntimeError, match="a real fault"):
        run(app_raising(RuntimeError("a real fault"), True), {"type": "websocket.receive", "bytes": b""})
    with pytest.raises(ValueError):
        run(app_raising(ValueError("bad"), False), {"type": "http.request", "body": b""}, kind="http")


def _request(port: int, host: str, path: str = "/", websocket: bool = False) -> tuple[int, dict[str, str]]:
    """A raw HTTP/1.1 request with this Host (and a websocket upgrade, with a matching Origin): status and headers."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    if websocket:
        key = base64.b64encode(os.urandom(16)).decode()
        lines[2:] = ["Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {key}", f"Origin: http://{host}"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    status_line, *header_lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in header_lines if ": " in line)}
    return int(status_line.split()[1]), headers


@pytest.fixture
def wide_server(tmp_path):
    """`egg ui` listening on every address, allowed one extra name (egg.lan); its stderr."""
    port = free_port()
    env = {**os.environ, "EGG_DB": str(tmp_path / "egg.sqlite"), "EGG_PORT": str(port)}
    env.pop("EGG_ALLOWED_HOSTS", None)
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "ui", "--address", "0.0.0.0", "--allow-host", "egg.lan"],
                                   stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                if reply.read() == b"ok":
                    break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"egg ui did not start:\n{log.read_text()}")
    yield port, log
    os.killpg(process.pid, 15)
    process.wait(timeout=20)


def test_a_real_egg_ui_refuses_a_foreign_host_on_every_path_and_the_websocket(wide_server):
    port, log = wide_server
    assert "warning: --address 0.0.0.0 listens beyond this machine" in log.read_text()
    for path in ("/", "/_stcore/health", "/session?id=x", "/static/../_stcore/health"):
        status, headers = _request(port, f"evil.example:{port}", path)
        assert status == 403, path
        assert headers["x-frame-options"] == "DENY"
    assert _request(port, f"evil.example:{port}", "/_stcore/stream", websocket=True)[0] == 403
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"egg.lan:{port}"):
        status, headers = _request(port, host)
        assert status == 200, host
        assert headers["x-frame-options"] == "DENY" and headers["content-security-policy"] == "frame-ancestors 'none'"
        assert _request(port, host, "/_stcore/stream", websocket=True)[0] == 101, host


def test_egg_ui_on_a_wide_address_with_no_allowed_host_is_refused_in_one_line(tmp_path):
    env = {**os.environ, "EGG_DB": str(tmp_path / "egg.sqlite")}
    env.pop("EGG_ALLOWED_HOSTS", None)
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "ui", "--address", "0.0.0.0", "--port", str(free_port())],
                          capture_output=True, text=True, env={**env, "COLUMNS": "300"}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--allow-host" in done.stderr
    assert not (tmp_path / "egg.sqlite").exists()
