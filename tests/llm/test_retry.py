import random

import pytest

from pipeline.llm.chat import ChatRequest, Conversation
from pipeline.llm.errors import TransportError, classify_http_error
from pipeline.llm.retry import RetryPolicy, parse_retry_after
from pipeline.llm.scripted import ScriptedProvider
from pipeline.llm.spec import parse_spec
from pipeline.llm.transport import RetryingTransport

RNG = random.Random(0)
POLICY = RetryPolicy(max_attempts=4, base_delay_s=1.0, max_delay_s=5.0, jitter=0.25, max_retry_after_s=60)


@pytest.mark.parametrize("status", ["rate_limited", "server_error", "connection_error", "timeout"])
def test_transient_failures_are_retried(status: str) -> None:
    assert POLICY.delay_s(TransportError(status, "x"), attempt=1, rng=RNG) is not None


@pytest.mark.parametrize("status", ["auth_error", "bad_request", "not_found", "context_overflow", "protocol_error"])
def test_permanent_failures_are_not_retried(status: str) -> None:
    assert POLICY.delay_s(TransportError(status, "x"), attempt=1, rng=RNG) is None


def test_retries_are_bounded_by_max_attempts() -> None:
    error = TransportError("server_error", "x")
    assert POLICY.delay_s(error, attempt=3, rng=RNG) is not None
    assert POLICY.delay_s(error, attempt=4, rng=RNG) is None


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    error = TransportError("connection_error", "x")
    for attempt, nominal in [(1, 1.0), (2, 2.0), (3, 4.0)]:
        delays = [POLICY.delay_s(error, attempt, random.Random(seed)) for seed in range(50)]
        assert all(0.75 * nominal <= d <= 1.25 * nominal for d in delays)
        assert len(set(delays)) > 1  # jittered
    capped = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_delay_s=5.0, jitter=0)
    assert capped.delay_s(error, attempt=8, rng=RNG) == 5.0


def test_retry_after_is_honoured_exactly_and_capped() -> None:
    assert POLICY.delay_s(TransportError("rate_limited", "x", retry_after_s=7.0), 1, RNG) == 7.0
    assert POLICY.delay_s(TransportError("rate_limited", "x", retry_after_s=3600.0), 1, RNG) is None


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now_s=1445412480.0) == 10.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("http_status", "message", "expected"),
    [
        (429, "slow down", "rate_limited"),
        (500, "boom", "server_error"),
        (503, "overloaded", "server_error"),
        (529, "overloaded_error", "server_error"),
        (401, "bad key", "auth_error"),
        (403, "forbidden", "auth_error"),
        (404, "no such model", "not_found"),
        (
            400,
            "request (3024 tokens) exceeds the available context size (512 tokens) (exceed_context_size_error)",
            "context_overflow",
        ),
        (400, "This model's maximum context length is 128000 tokens", "context_overflow"),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", "context_overflow"),
        (400, "temperature must be at most 2", "bad_request"),
        (422, "unprocessable", "bad_request"),
    ],
)
def test_http_errors_are_classified(http_status: int, message: str, expected: str) -> None:
    assert classify_http_error(http_status, message) == expected


def request() -> ChatRequest:
    return ChatRequest(
        spec=parse_spec("openai:m@http://h:1/v1"), conversation=Conversation().with_user("hi"), max_tokens=8
    )


def test_transport_records_every_attempt_and_sleeps_as_told() -> None:
    slept: list[float] = []
    provider = ScriptedProvider(
        [
            TransportError("rate_limited", "429", http_status=429, retry_after_s=1.0),
            TransportError("server_error", "500", http_status=500),
            "hello",
        ]
    )
    transport = RetryingTransport(provider, RetryPolicy(jitter=0), concurrency=1, sleep=slept.append)
    exchange = transport.exchange(request())
    assert exchange.status == "ok" and exchange.response is not None and exchange.response.text == "hello"
    assert [a.status for a in exchange.attempts] == ["rate_limited", "server_error", "ok"]
    assert [a.wait_s for a in exchange.attempts] == [1.0, 2.0, 0.0]
    assert exchange.attempts[0].retry_after_s == 1.0 and exchange.attempts[0].http_status == 429
    assert slept == [1.0, 2.0]


def test_transport_gives_up_at_once_on_a_permanent_failure() -> None:
    slept: list[float] = []
    provider = ScriptedProvider([TransportError("auth_error", "HTTP 401: bad key", http_status=401), "never sent"])
    exchange = RetryingTransport(provider, RetryPolicy(), concurrency=1, sleep=slept.append).exchange(request())
    assert (exchange.status, exchange.error, exchange.response) == ("auth_error", "HTTP 401: bad key", None)
    assert len(exchange.attempts) == 1 and slept == [] and len(provider.requests) == 1


def test_transport_gives_up_after_max_attempts() -> None:
    provider = ScriptedProvider([TransportError("connection_error", "refused")] * 5)
    policy = RetryPolicy(max_attempts=3, jitter=0)
    exchange = RetryingTransport(provider, policy, concurrency=1, sleep=lambda s: None).exchange(request())
    assert exchange.status == "connection_error"
    assert [a.number for a in exchange.attempts] == [1, 2, 3]
    assert exchange.attempts[-1].wait_s == 0.0
