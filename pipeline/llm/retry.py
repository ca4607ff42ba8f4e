"""When to try a failed LLM request again, and how long to wait first."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.llm.errors import RETRYABLE, TransportError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter on transient failures; nothing else is retried.

    `max_attempts` counts the first try. A server's Retry-After is honoured as given (never shortened), unless it
    asks for more than `max_retry_after_s`: then the call fails now instead of sleeping for an unbounded time.
    """

    max_attempts: int = 4
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    jitter: float = 0.25  # each backoff is scaled by a random factor in [1 - jitter, 1 + jitter]
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def delay_s(self, error: TransportError, attempt: int, rng: random.Random) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None to give up after `attempt` (1-based)."""
        if error.status not in RETRYABLE or attempt >= self.max_attempts:
            return None
        if error.retry_after_s is not None:
            return error.retry_after_s if error.retry_after_s <= self.max_retry_after_s else None
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return backoff * rng.uniform(1 - self.jitter, 1 + self.jitter)


def parse_retry_after(headers: Mapping[str, str], now_s: float | None = None) -> float | None:
    """Seconds a server asked us to wait: `retry-after-ms`, `retry-after` in seconds or as an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := _number(lowered.get("retry-after-ms"))) is not None:
        return max(0.0, ms / 1000)
    value = lowered.get("retry-after")
    if value is None:
        return None
    if (seconds := _number(value)) is not None:
        return max(0.0, seconds)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now_s is None else now_s))


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
