"""The web app answers only to its own host: a Host check in front of Streamlit's server, and anti-framing headers.

Streamlit checks a request's Origin (XSRF, CORS) but not its Host, so a page served under a foreign name that its
DNS points at 127.0.0.1 (DNS rebinding) would talk to the app as same-origin, websocket included. `HostGuard` is a
plain ASGI middleware (no Streamlit, no Starlette import), installed through `st.App(..., middleware=...)` by
components/server.py: a request whose Host is not loopback or a name the person allowed gets 403, the websocket
`/_stcore/stream` included, and every HTTP response carries X-Frame-Options and CSP frame-ancestors.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

ALLOWED_HOSTS_VARIABLE = "EGG_ALLOWED_HOSTS"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
FRAMING_HEADERS = ((b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"))
REFUSAL = b"egg: this app answers only to its own host name (set EGG_ALLOWED_HOSTS or egg ui --allow-host to add one)\n"


def host_name(header: str) -> str:
    """The name in a Host header, lower case, without its port or a trailing dot ("[::1]:8501" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal
        return header[1:header.find("]")] if "]" in header else ""
    name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def parse_hosts(text: str) -> frozenset[str]:
    """Names from a comma- or space-separated list (EGG_ALLOWED_HOSTS, --allow-host), as host_name() gives them."""
    return frozenset(filter(None, (host_name(part) for part in text.replace(",", " ").split())))


def is_loopback(address: str) -> bool:
    """Whether a listening address is this machine only (127.0.0.0/8, ::1, localhost)."""
    name = host_name(address) if address.startswith("[") else address.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    """The names the app answers to: loopback always, plus those the person allowed."""

    allowed: frozenset[str] = frozenset()

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> HostPolicy:
        environ = os.environ if environ is None else environ
        return cls(parse_hosts(environ.get(ALLOWED_HOSTS_VARIABLE, "")))

    def allows(self, header: str | None) -> bool:
        """A request with no Host header, or any other name, is refused."""
        if not header:
            return False
        name = host_name(header)
        return name in LOOPBACK_NAMES or name in self.allowed


Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class HostGuard:
    """ASGI middleware: 403 for a foreign Host (HTTP and websocket), anti-framing headers on every HTTP response."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], policy: HostPolicy | None = None) -> None:
        self.app = app
        self.policy = policy if policy is not None else HostPolicy.from_environment()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not self.policy.allows(_header(scope, b"host")):
            await (_refuse_http(send) if scope["type"] == "http" else _refuse_websocket(receive, send))
            return
        if scope["type"] == "websocket":
            await _quiet_after_close(self.app, scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _with_framing_headers(message.get("headers", ()))}
            await send(message)

        await _quiet_after_close(self.app, scope, receive, framed)


# What the server and Starlette raise into an app whose client went away (matched by name: no import of either).
DISCONNECTS = frozenset({"WebSocketDisconnect", "ClientDisconnect", "ClientDisconnected", "ConnectionClosed",
                         "ConnectionClosedOK", "ConnectionClosedError", "ClosedResourceError", "BrokenResourceError"})


async def _quiet_after_close(app: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope, receive: Receive, send: Send) -> None:
    """Run the app; an error raised once its client has gone (a closed tab, a reload, the server stopping) is the end
    of that connection, not a fault: it goes to the debug log, not as an "Exception in ASGI application" traceback.
    Any other error is raised as it was."""
    gone = False

    async def watched_receive() -> Message:
        nonlocal gone
        message = await receive()
        gone = gone or message.get("type") in ("websocket.disconnect", "http.disconnect")
        return message

    async def watched_send(message: Message) -> None:
        nonlocal gone
        try:
            await send(message)
        except BaseException:
            gone = True
            raise

    try:
        await app(scope, watched_receive, watched_send)
    except BaseException as error:
        names = {kind.__name__ for kind in type(error).__mro__}
        if not (gone or names & DISCONNECTS) or isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        logging.getLogger("egg.ui").debug("a %s connection ended with %s after its client left", scope["type"], type(error).__name__)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _with_framing_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() != b"x-frame-options"]
    return kept + list(FRAMING_HEADERS)


async def _refuse_http(send: Send) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(REFUSAL)).encode()), *FRAMING_HEADERS]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": REFUSAL})


async def _refuse_websocket(receive: Receive, send: Send) -> None:
    """Closing before accepting: the ASGI server answers the handshake with 403 and never upgrades."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})
