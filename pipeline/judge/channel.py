"""The line between the judge and one running job: JSON messages, with file descriptors riding along.

The judge listens on a Unix socket in the job's folder (the one path both sides see, whatever the job's own root
is); the job connects once. Messages are packets (SOCK_SEQPACKET, so each arrives whole), JSON objects of at most
`MAX_MESSAGE_BYTES`, each carrying at most `MAX_FDS` descriptors: the judge sends the plan of the calls, the job
sends its phases, its outputs (as exported GPU memory, `pipeline.judge.devicemem`, or as files whose names the
judge derives), requests for a call's subsample and the marks around its timed trials.

Imports: the standard library only (the GPU worker uses this module).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading

MAX_MESSAGE_BYTES = 1 << 16
MAX_FDS = 8
SOCKET_NAME = "channel.sock"

# The protocol. A job reports its phases in this order (a reference job skips the candidate's, and the other way
# round); the compile timeout covers the first ones, the run timeout the rest.
PHASES = ("isolation", "cuda_init", "setup", "wait_start", "import", "construct", "wait_inputs", "first_call",
          "correctness", "other_shapes", "repeats", "asked_again", "audit", "reference", "baselines", "wait_go", "timing",
          "done")
COMPILE_PHASES = PHASES[: PHASES.index("correctness")]
ASKED_AGAIN = "_asked_again"  # the suffix of the call that asks once more for a set of another shape it refused
CALL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # the names of calls whose outputs travel (also file names)
MAX_MESSAGES = 20_000  # from one job: more is a flood, not a protocol


class ChannelClosed(ConnectionError):
    """The other side went away."""


class Connection:
    """One connected end; thread-safe sends."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
        data = json.dumps(message).encode()
        if len(data) > MAX_MESSAGE_BYTES or len(fds) > MAX_FDS:
            raise ValueError("message too large for the channel")
        with self._send_lock:
            try:
                if fds:
                    socket.send_fds(self.sock, [data], list(fds))
                else:
                    self.sock.sendall(data)
            except OSError as exc:
                raise ChannelClosed(str(exc)) from exc

    def receive(self, timeout_s: float | None = None) -> tuple[dict, list[int]]:
        """The next message and its descriptors (the receiver owns and must close them). Raises ChannelClosed at
        the end, TimeoutError when `timeout_s` passes first."""
        self.sock.settimeout(timeout_s)
        for attempt in range(2):
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE_BYTES, MAX_FDS)
                break
            except socket.timeout as exc:
                raise TimeoutError("no message") from exc
            except ConnectionResetError as exc:
                # Linux reports ECONNRESET once, *before* the queued messages, when the other side closed with
                # messages of ours unread (a worker that finished without taking every `next`): what it sent
                # last (its `done`) still follows, then the end.
                if attempt:
                    raise ChannelClosed(str(exc)) from exc
            except OSError as exc:
                raise ChannelClosed(str(exc)) from exc
        if not data:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("the other side closed the channel")
        try:
            message = json.loads(data)
        except ValueError:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("a message that is not JSON")
        if not isinstance(message, dict):
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("a message that is not a JSON object")
        return message, fds

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Listener:
    """The judge's end: a socket at `folder/channel.sock` that one job connects to."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = os.path.join(os.fspath(folder), SOCKET_NAME)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o666)  # the job may run as another uid; only it sees this folder
        self.sock.listen(1)

    def accept(self, timeout_s: float | None = None) -> Connection:
        self.sock.settimeout(timeout_s)
        try:
            conn, _ = self.sock.accept()
        except socket.timeout as exc:
            raise TimeoutError("the job did not connect") from exc
        conn.settimeout(None)
        return Connection(conn)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(folder: str | os.PathLike[str]) -> Connection | None:
    """The job's end, or None when the judge offers no channel (a job started without one)."""
    path = os.path.join(os.fspath(folder), SOCKET_NAME)
    if not os.path.exists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
    return Connection(sock)
