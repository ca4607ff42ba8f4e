"""A provider that plays a script: deterministic replies and failures, for tests and offline demos."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pipeline.llm.accounting import Ledger
from pipeline.llm.chat import ChatRequest, ChatResponse, Usage
from pipeline.llm.client import CallSettings, LLMClient
from pipeline.llm.errors import TransportError
from pipeline.llm.retry import RetryPolicy
from pipeline.llm.spec import parse_spec
from pipeline.llm.transport import RetryingTransport


class ScriptedProvider:
    """Answers each request with the next item of its script: a reply text, or a TransportError to raise.

    Token counts are word counts, so accounting can be checked. Running out of script is a protocol_error.
    `requests` keeps every request received, in order.
    """

    def __init__(self, script: Iterable[str | TransportError]) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        """The next scripted reply (or raise the next scripted failure)."""
        with self._lock:
            self.requests.append(request)
            if not self._script:
                raise TransportError("protocol_error", "the script has no more replies")
            item = self._script.pop(0)
        if isinstance(item, TransportError):
            raise item
        words_in = sum(len(m.content.split()) for m in request.conversation.messages)
        usage = Usage(input_tokens=words_in, output_tokens=len(item.split()))
        return ChatResponse(text=item, usage=usage, finish_reason="stop", model=request.spec.model)


def scripted_client(
    script: Iterable[str | TransportError], *, spec: str = "openai:scripted", ledger: Ledger | None = None
) -> tuple[LLMClient, ScriptedProvider]:
    """An LLMClient over a ScriptedProvider (returned too, to inspect the requests it got): the real retry,
    accounting and structured-reply code with no network. Retries do not sleep."""
    provider = ScriptedProvider(script)
    transport = RetryingTransport(provider, RetryPolicy(jitter=0), concurrency=1, sleep=lambda _: None)
    return LLMClient(transport, CallSettings(spec=parse_spec(spec), max_tokens=256), ledger), provider
