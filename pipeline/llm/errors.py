"""Typed failures of the LLM layer. Status names are stable snake_case: the store keeps them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pipeline.llm.accounting import CallRecord

FailureStatus = Literal[
    "rate_limited",  # 429
    "server_error",  # 5xx
    "connection_error",  # refused, reset, DNS, server gone mid-reply
    "timeout",  # no complete reply within timeout_s
    "auth_error",  # 401/403: bad or missing key
    "bad_request",  # 400/422: the request itself is wrong
    "not_found",  # 404: wrong model name or base URL
    "context_overflow",  # the conversation does not fit the model's context
    "protocol_error",  # a 2xx reply we cannot read
]
RETRYABLE: frozenset[str] = frozenset({"rate_limited", "server_error", "connection_error", "timeout"})


class LLMError(Exception):
    """Base of every error this package raises on purpose."""


class TransportError(LLMError):
    """One failed attempt, as a provider reports it. Retries decide on `status` and `retry_after_s`."""

    def __init__(
        self, status: FailureStatus, message: str, *, http_status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.http_status = http_status
        self.retry_after_s = retry_after_s


class LLMCallError(LLMError):
    """A call that failed for good (after any retries). Its record, with every attempt, is already kept."""

    def __init__(self, record: CallRecord) -> None:
        super().__init__(f"{record.status}: {record.error} (after {len(record.attempts)} attempt(s))")
        self.record = record

    @property
    def status(self) -> str:
        """The stable status of the last attempt (e.g. connection_error, timeout)."""
        return self.record.status


class CassetteMiss(LLMError):
    """A replay was asked for a request the cassette does not hold. Replay never goes to the network."""


def classify_http_error(http_status: int, message: str) -> FailureStatus:
    """Map an HTTP error status (and, for 400/413, its message) to a stable failure status."""
    if http_status == 429:
        return "rate_limited"
    if http_status >= 500:
        return "server_error"
    if http_status in (401, 403):
        return "auth_error"
    if http_status == 404:
        return "not_found"
    if http_status in (400, 413, 422) and _mentions_context(message):
        return "context_overflow"
    if http_status == 408:
        return "timeout"
    return "bad_request"


_CONTEXT_MARKERS = (
    "context_length_exceeded",  # OpenAI
    "exceed_context_size",  # llama.cpp
    "maximum context length",  # OpenAI, vLLM
    "context window",
    "context length",
    "context size",  # llama.cpp
    "prompt is too long",  # Anthropic
    "too many tokens",
)


def _mentions_context(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _CONTEXT_MARKERS)
