"""Against a real model: llama.cpp's llama-server with Gemma 3 270M (a base model that echoes), both APIs.

Replies are garbage by design, so these check structure and robustness, never content. max_tokens stays small.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pipeline.config import CassetteConfig, LLMConfig, RetryConfig
from pipeline.llm.accounting import Price
from pipeline.llm.chat import Conversation
from pipeline.llm.client import LLMClient, open_client
from pipeline.llm.errors import CassetteMiss, LLMCallError
from pipeline.llm.structured import Parsed, StructuredFailure, ask
from tests.llm.http_stub import silent_for

PROVIDERS = ["openai", "anthropic"]
FAST_RETRY = RetryConfig(max_attempts=3, base_delay_s=0.05, max_delay_s=0.1)
FINISH_REASONS = {"stop", "length", "end_turn", "max_tokens"}


def client_for(provider: str, url: str, **settings: Any) -> LLMClient:
    fields: dict[str, Any] = {"spec": f"{provider}:gemma@{url}", "max_tokens": 16, "retry": FAST_RETRY, "timeout_s": 60}
    return open_client(LLMConfig.model_validate({**fields, **settings}))


class Bottleneck(BaseModel):
    kind: str
    evidence: list[str]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plain_completion_with_history(llama_server, provider: str) -> None:
    client = client_for(
        provider, llama_server.url, prices={"gemma": Price(input_usd_per_mtok=1, output_usd_per_mtok=2)}
    )
    conversation = Conversation(system="You are terse.").with_user("Say hi.").with_assistant("Hi.").with_user("Again.")
    reply = client.complete(conversation)
    assert isinstance(reply.text, str) and reply.finish_reason in FINISH_REASONS
    assert 0 < reply.usage.output_tokens <= 16 and reply.usage.input_tokens > 5  # the whole history was sent
    (record,) = client.ledger.records
    assert (record.status, len(record.attempts), record.base_url) == ("ok", 1, llama_server.url)
    expected_usd = (reply.usage.input_tokens * 1 + reply.usage.output_tokens * 2) / 1e6
    assert record.cost_usd == pytest.approx(expected_usd) and record.latency_s > 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_structured_reply_from_a_model_that_babbles(llama_server, provider: str) -> None:
    client = client_for(provider, llama_server.url, max_tokens=32)
    result = ask(client, Conversation(system="You profile GPU kernels."), "Name the bottleneck.", Bottleneck, repairs=1)
    if isinstance(result, Parsed):  # a base model rarely manages, but success must be a valid value
        assert isinstance(result.value, Bottleneck)
        return
    assert isinstance(result, StructuredFailure) and result.status == "malformed_reply"
    assert len(result.errors) == 2 and len(client.ledger.records) == 2
    roles = [m.role for m in result.conversation.messages]
    assert roles == ["user", "assistant", "user", "assistant"]  # garbage went back with the reason
    assert "could not be used" in result.conversation.messages[2].content


@pytest.mark.parametrize("provider", PROVIDERS)
def test_context_overflow_is_a_clear_error_and_not_retried(llama_server, provider: str) -> None:
    client = client_for(provider, llama_server.url)
    with pytest.raises(LLMCallError) as raised:
        client.complete(Conversation().with_user("word " * 5000))
    assert raised.value.status == "context_overflow"
    assert len(raised.value.record.attempts) == 1 and "context" in (raised.value.record.error or "")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_server_killed_mid_run(llama_server_factory, provider: str) -> None:
    server = llama_server_factory(parallel=1, context=2048)
    client = client_for(provider, server.url)
    client.complete(Conversation().with_user("First call, while the server lives."), max_tokens=4)

    outcome: list[BaseException] = []

    def long_call() -> None:
        try:  # 256 tokens takes seconds; the server dies long before, so this stays cheap
            client.complete(Conversation().with_user("Second call, cut off."), max_tokens=256)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=long_call)
    thread.start()
    time.sleep(0.7)
    server.process.kill()
    thread.join(timeout=30)
    (error,) = outcome
    assert isinstance(error, LLMCallError) and error.status == "connection_error"
    first, failed = client.ledger.records
    assert first.status == "ok"
    assert [a.status for a in failed.attempts] == ["connection_error"] * FAST_RETRY.max_attempts
    assert failed.attempts[0].latency_s >= 0.5  # the first attempt was in flight when the server died
    assert all(a.wait_s > 0 for a in failed.attempts[:-1]) and failed.attempts[-1].wait_s == 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_timeout_against_a_silent_server(stub_server, provider: str) -> None:
    stub = stub_server([silent_for(3.0)])
    client = client_for(provider, stub.url, timeout_s=0.3, retry=RetryConfig(max_attempts=2, base_delay_s=0.01))
    started = time.monotonic()
    with pytest.raises(LLMCallError) as raised:
        client.complete(Conversation().with_user("hello"))
    assert raised.value.status == "timeout"
    attempts = raised.value.record.attempts
    assert [a.status for a in attempts] == ["timeout", "timeout"] and len(stub.requests) == 2
    assert all(0.25 <= a.latency_s < 2.0 for a in attempts) and time.monotonic() - started < 3.0


def test_timeout_against_a_real_generation(llama_server) -> None:
    client = client_for("openai", llama_server.url, timeout_s=0.1, retry=RetryConfig(max_attempts=1))
    with pytest.raises(LLMCallError) as raised:
        client.complete(Conversation().with_user("Count slowly to one hundred."), max_tokens=48)
    assert raised.value.status == "timeout" and len(raised.value.record.attempts) == 1


def a_run(client: LLMClient) -> list[Any]:
    """A small run: a multi-turn exchange on each API shape, then a structured ask with its feedback loop."""
    results: list[Any] = []
    conversation = Conversation(system="You write Triton kernels.")
    for turn in ["Plan a softmax kernel.", "Now tile it.", "Now pipeline it."]:
        conversation = conversation.with_user(turn)
        reply = client.labelled(stage="seeds", agent="code").complete(conversation)
        results.append(reply)
        conversation = conversation.with_assistant(reply.text)
    results.append(
        ask(client.labelled(stage="seeds", agent="profile"), conversation, "Name it.", Bottleneck, repairs=1)
    )
    return results


def test_a_run_replays_offline_from_its_cassette(llama_server, tmp_path: Path) -> None:
    cassette = tmp_path / "run.cassette.jsonl"
    recording = client_for("openai", llama_server.url, cassette=CassetteConfig(mode="record", path=cassette))
    recorded = a_run(recording.labelled(run="r1", problem="23_Softmax"))

    closed = "http://127.0.0.1:9/v1"  # nothing listens there: replay must not need the network
    replaying = client_for("openai", closed, cassette=CassetteConfig(mode="replay", path=cassette))
    assert a_run(replaying.labelled(run="r1", problem="23_Softmax")) == recorded

    def same(record: Any) -> dict[str, Any]:
        return record.model_dump(exclude={"started_at", "replayed"})

    assert [same(r) for r in replaying.ledger.records] == [same(r) for r in recording.ledger.records]
    assert len(replaying.ledger.records) >= 5 and all(r.replayed for r in replaying.ledger.records)
    with pytest.raises(CassetteMiss):
        replaying.complete(Conversation(system="You write Triton kernels.").with_user("A question never asked."))
