from pathlib import Path

import pytest

from pipeline.llm.accounting import Ledger
from pipeline.llm.cassette import RecordingTransport, ReplayTransport
from pipeline.llm.chat import ChatRequest, Conversation
from pipeline.llm.client import CallSettings, LLMClient
from pipeline.llm.errors import CassetteMiss, LLMCallError, TransportError
from pipeline.llm.retry import RetryPolicy
from pipeline.llm.scripted import ScriptedProvider
from pipeline.llm.spec import parse_spec
from pipeline.llm.transport import RetryingTransport, Transport


def make_request(spec: str = "openai:m@http://127.0.0.1:1/v1", **changes: object) -> ChatRequest:
    fields = {"spec": parse_spec(spec), "conversation": Conversation(system="s").with_user("hi"), "max_tokens": 16}
    return ChatRequest(**{**fields, **changes})


def test_key_ignores_where_the_request_goes_but_not_what_it_asks() -> None:
    base = make_request().key()
    assert make_request("openai:m@http://10.0.0.1:9/v1").key() == base
    assert make_request("openai:m").key() == base
    assert make_request("anthropic:m").key() != base
    assert make_request("openai:other").key() != base
    assert make_request(max_tokens=17).key() != base
    assert make_request(temperature=0.0).key() != base
    assert make_request(conversation=Conversation(system="t").with_user("hi")).key() != base
    assert make_request(conversation=Conversation(system="s").with_user("hi!")).key() != base


def test_key_is_a_stable_hash_of_the_canonical_request() -> None:
    request = make_request()
    assert request.canonical() == {
        "provider": "openai",
        "model": "m",
        "system": "s",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "temperature": None,
    }
    assert (
        request.key() == "e9c942fd1cfcd9833aa323eb70dbe82e338963ed9570c48c7bb16812411c591d"
    )  # pinned: old cassettes must keep matching


def client_over(transport: Transport, spec: str = "openai:m@http://127.0.0.1:1/v1") -> LLMClient:
    return LLMClient(transport, CallSettings(spec=parse_spec(spec), max_tokens=16), Ledger())


def conversation_of(client: LLMClient) -> list[str]:
    replies = []
    conversation = Conversation(system="s")
    for question in ["one", "two", "one"]:
        conversation = (
            Conversation(system="s").with_user(question) if question == "one" else conversation.with_user(question)
        )
        try:
            replies.append(client.complete(conversation).text)
        except LLMCallError as error:
            replies.append(error.status)
        conversation = conversation.with_assistant(replies[-1])
    return replies


def test_replay_reproduces_replies_failures_and_records(tmp_path: Path) -> None:
    path = tmp_path / "run.cassette.jsonl"
    script = ["first", TransportError("bad_request", "HTTP 400: no"), "third"]
    provider = ScriptedProvider(script)
    live = client_over(RecordingTransport(RetryingTransport(provider, RetryPolicy(), 1), path))
    recorded = conversation_of(live)
    assert recorded == ["first", "bad_request", "third"]  # the same question twice gets its two answers in order

    replay = client_over(ReplayTransport(path), spec="openai:m@http://127.0.0.1:9/v1")
    assert conversation_of(replay) == recorded

    def same(record: object) -> dict:
        return record.model_dump(exclude={"started_at", "replayed"})  # type: ignore[attr-defined]

    assert [same(r) for r in replay.ledger.records] == [same(r) for r in live.ledger.records]
    assert all(r.replayed for r in replay.ledger.records)


def test_replay_misses_raise_and_never_call_out(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    client_over(RecordingTransport(RetryingTransport(ScriptedProvider(["a"]), RetryPolicy(), 1), path)).complete(
        Conversation(system="s").with_user("hi")
    )
    replay = client_over(ReplayTransport(path))
    with pytest.raises(CassetteMiss, match="never recorded"):
        replay.complete(Conversation(system="s").with_user("changed"))
    replay.complete(Conversation(system="s").with_user("hi"))
    with pytest.raises(CassetteMiss, match="recorded 1 time"):
        replay.complete(Conversation(system="s").with_user("hi"))
    with pytest.raises(CassetteMiss, match="does not exist"):
        ReplayTransport(tmp_path / "missing.jsonl")
