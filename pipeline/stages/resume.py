"""Every language-model exchange of a run is kept in the store, so a resumed run replays them instead of paying
for them again, and reaches the point where it was killed with the same replies it had."""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable

from pipeline.llm.chat import ChatRequest
from pipeline.llm.transport import Exchange, Transport
from pipeline.store import Store


class StoreTransport:
    """Answers a request from the store when this run already got a reply to it (the n-th identical request gets
    the n-th recorded reply); otherwise asks the inner transport and keeps what it answers."""

    def __init__(self, inner: Transport, store: Store, run_id: str, on_replay: Callable[[ChatRequest], None] | None = None) -> None:
        self._inner, self._store, self._run_id = inner, store, run_id
        self._on_replay = on_replay  # a scripted model skips the replies the store answers for it
        self._seen: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self.replayed = 0

    def exchange(self, request: ChatRequest) -> Exchange:
        key = request.key()
        with self._lock:
            occurrence = self._seen[key]
            self._seen[key] += 1
        kept = self._store.exchange(self._run_id, key, occurrence)
        if kept is not None:
            self.replayed += 1
            if self._on_replay is not None:
                self._on_replay(request)
            return Exchange.model_validate_json(kept).model_copy(update={"replayed": True})
        exchange = self._inner.exchange(request)
        if exchange.response is not None:  # failures are not kept: a resumed run tries again
            self._store.save_exchange(self._run_id, key, occurrence, exchange.model_dump_json(), json.dumps(request.canonical()))
        return exchange
