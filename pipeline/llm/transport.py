"""Sending a request through a provider: retries with backoff, a concurrency limit, every attempt kept."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from pipeline.llm.accounting import Attempt
from pipeline.llm.chat import ChatRequest, ChatResponse
from pipeline.llm.errors import TransportError
from pipeline.llm.provider import Provider
from pipeline.llm.retry import RetryPolicy


class Exchange(BaseModel):
    """What became of one request: a response or the last failure, with every attempt. Cassettes store these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None
    response: ChatResponse | None
    status: str  # "ok" or the FailureStatus of the last attempt
    error: str | None
    attempts: tuple[Attempt, ...]
    latency_s: float
    replayed: bool = False  # served from a cassette


class Transport(Protocol):
    """Turns a request into an exchange. Never raises for a failed request: the exchange says it failed."""

    def exchange(self, request: ChatRequest) -> Exchange: ...


class RetryingTransport:
    """A provider behind a retry policy and a limit on requests in flight (shared by every client using it)."""

    def __init__(
        self,
        provider: Provider,
        policy: RetryPolicy,
        concurrency: int,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._provider = provider
        self._policy = policy
        self._slots = threading.BoundedSemaphore(concurrency)
        self._sleep = sleep
        self._rng = rng or random.Random()

    def exchange(self, request: ChatRequest) -> Exchange:
        """Try `request` until it succeeds, fails for good, or the policy's attempts run out."""
        started = time.monotonic()
        attempts: list[Attempt] = []
        while True:
            number = len(attempts) + 1
            response, error, latency_s = self._attempt(request)
            if error is None:
                attempts.append(Attempt(number=number, status="ok", latency_s=latency_s))
                return self._finish(request, response, None, attempts, started)
            wait_s = self._policy.delay_s(error, number, self._rng)
            attempts.append(_failed_attempt(number, error, latency_s, wait_s))
            if wait_s is None:
                return self._finish(request, None, error, attempts, started)
            self._sleep(wait_s)

    def _attempt(self, request: ChatRequest) -> tuple[ChatResponse | None, TransportError | None, float]:
        with self._slots:  # held per attempt, not while backing off
            started = time.monotonic()
            try:
                return self._provider.complete(request), None, time.monotonic() - started
            except TransportError as error:
                return None, error, time.monotonic() - started

    @staticmethod
    def _finish(
        request: ChatRequest,
        response: ChatResponse | None,
        error: TransportError | None,
        attempts: list[Attempt],
        started: float,
    ) -> Exchange:
        return Exchange(
            base_url=request.spec.base_url,
            response=response,
            status="ok" if error is None else error.status,
            error=None if error is None else error.message,
            attempts=tuple(attempts),
            latency_s=time.monotonic() - started,
        )


def _failed_attempt(number: int, error: TransportError, latency_s: float, wait_s: float | None) -> Attempt:
    return Attempt(
        number=number,
        status=error.status,
        latency_s=latency_s,
        http_status=error.http_status,
        error=error.message,
        retry_after_s=error.retry_after_s,
        wait_s=wait_s or 0.0,
    )
