"""Record every exchange with a model to a cassette file, and replay it offline, deterministically.

A cassette is JSON lines, one exchange each: the canonical request (so the file is a readable transcript),
its key, and the exchange (reply or failure, every attempt). Recording appends, so a resumed run keeps what
it had. Replay serves the recordings of each key in the order they were made; a request it does not hold, or
asked more often than recorded, raises CassetteMiss. Replay never goes to the network.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from pathlib import Path

from pipeline.llm.chat import ChatRequest
from pipeline.llm.errors import CassetteMiss
from pipeline.llm.transport import Exchange, Transport


def append_exchange(path: Path, request: ChatRequest, exchange: Exchange) -> None:
    """Append one exchange to the cassette at `path` (flushed and fsynced)."""
    entry = {"key": request.key(), "request": request.canonical(), "exchange": exchange.model_dump(mode="json")}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_cassette(path: Path) -> dict[str, list[Exchange]]:
    """The exchanges of a cassette, per request key, in recording order."""
    entries: dict[str, list[Exchange]] = defaultdict(list)
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                entries[entry["key"]].append(Exchange.model_validate(entry["exchange"]))
    return dict(entries)


class RecordingTransport:
    """Passes requests to another transport and appends each exchange to a cassette."""

    def __init__(self, inner: Transport, path: Path) -> None:
        self._inner = inner
        self._path = path
        self._lock = threading.Lock()

    def exchange(self, request: ChatRequest) -> Exchange:
        """The inner transport's exchange, recorded before it is returned."""
        exchange = self._inner.exchange(request)
        with self._lock:
            append_exchange(self._path, request, exchange)
        return exchange


class ReplayTransport:
    """Serves exchanges from a cassette; raises CassetteMiss for anything it does not hold."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise CassetteMiss(f"cassette {path} does not exist: record it first (llm.cassette.mode: record)")
        self._path = path
        self._entries = read_cassette(path)
        self._served: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def exchange(self, request: ChatRequest) -> Exchange:
        """The next recorded exchange for this exact request."""
        key = request.key()
        with self._lock:
            recorded = self._entries.get(key, [])
            index = self._served[key]
            if index >= len(recorded):
                raise CassetteMiss(_miss_message(self._path, request, key, len(recorded)))
            self._served[key] += 1
        return recorded[index].model_copy(update={"replayed": True})


def _miss_message(path: Path, request: ChatRequest, key: str, recorded: int) -> str:
    messages = request.conversation.messages
    last = messages[-1].content[:60] if messages else ""
    seen = f"recorded {recorded} time(s), asked once more" if recorded else "never recorded"
    return (
        f"cassette {path} has no reply for request {key[:12]} ({request.spec.provider}:{request.spec.model}, "
        f"{len(messages)} message(s), last {last!r}): {seen}; record again with llm.cassette.mode: record"
    )
