from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from pipeline.llm.chat import Conversation
from pipeline.llm.errors import LLMCallError, TransportError
from pipeline.llm.scripted import scripted_client
from pipeline.llm.structured import (
    CodeBlock,
    Parsed,
    ReplyError,
    StructuredFailure,
    ask,
    extract_code,
    fenced_blocks,
    parse_reply,
    reply_instructions,
    reply_schema,
)


class Bottleneck(BaseModel):
    kind: str = Field(description="memory, compute or latency")
    evidence: list[str]
    confidence: float = 0.5  # a default the model must still state


class Rewrite(BaseModel):
    plan: str
    kernel: Annotated[str, CodeBlock("python")] = Field(description="the whole new module")


GOOD_BOTTLENECK = '```json\n{"kind": "memory", "evidence": ["dram 91%"], "confidence": 0.9}\n```'


def test_fenced_blocks_and_code_extraction() -> None:
    text = (
        "intro\n```py\nold = 1\n```\ntext\n````python\nnew = 2\n```inner```\n````\n```\nplain\n```\n```cpp\nint x;\n```"
    )
    assert [b.language for b in fenced_blocks(text)] == ["python", "python", "", "cpp"]
    assert extract_code(text) == "new = 2\n```inner```\n"  # the last python block, longer fences nest
    assert extract_code(text, "cpp") == "int x;\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"  # untagged blocks count when none is tagged
    assert extract_code("```python\nunterminated") is None
    assert extract_code("no code here") is None


def test_schema_comes_from_the_type_without_code_fields_and_requires_everything() -> None:
    schema = reply_schema(Bottleneck)
    assert schema["properties"] == Bottleneck.model_json_schema()["properties"]
    assert schema["required"] == ["kind", "evidence", "confidence"]
    assert list(reply_schema(Rewrite)["properties"]) == ["plan"]
    instructions = reply_instructions(Rewrite)
    assert (
        '"plan"' in instructions and "```python fenced block" in instructions and "the whole new module" in instructions
    )


def test_two_code_fields_in_one_language_are_refused() -> None:
    class Ambiguous(BaseModel):
        a: Annotated[str, CodeBlock("python")]
        b: Annotated[str, CodeBlock("python")]

    with pytest.raises(TypeError, match="share a language"):
        reply_schema(Ambiguous)


def test_parse_reply_reads_json_and_code() -> None:
    assert parse_reply(GOOD_BOTTLENECK, Bottleneck) == Bottleneck(kind="memory", evidence=["dram 91%"], confidence=0.9)
    assert parse_reply('{"kind": "memory", "evidence": [], "confidence": 1}', Bottleneck).confidence == 1
    text = 'Plan first.\n```json\n{"plan": "fuse"}\n```\n```python\nclass ModelNew: ...\n```'
    assert parse_reply(text, Rewrite) == Rewrite(plan="fuse", kernel="class ModelNew: ...\n")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("no json at all", "no ```json fenced block"),
        ("```json\n{kind: memory}\n```", "not valid JSON"),
        ("```json\n[1, 2]\n```", "holds a list"),
        ('```json\n{"kind": "memory", "evidence": []}\n```', "missing field.*confidence"),  # no default filled in
        (
            '```json\n{"kind": "memory", "evidence": "x", "confidence": 1}\n```',
            "evidence: Input should be a valid list",
        ),
    ],
)
def test_parse_reply_says_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(ReplyError, match=reason):
        parse_reply(text, Bottleneck)


def test_missing_code_block_is_an_error() -> None:
    with pytest.raises(ReplyError, match="no ```python fenced block found for `kernel`"):
        parse_reply('```json\n{"plan": "fuse"}\n```', Rewrite)


def test_truncated_reply_says_so() -> None:
    with pytest.raises(ReplyError, match="cut off at the token limit"):
        parse_reply("```json\n{", Bottleneck, truncated=True)


def test_ask_returns_a_valid_reply_at_once() -> None:
    client, provider = scripted_client([GOOD_BOTTLENECK])
    result = ask(client, Conversation(system="You profile kernels."), "Name the bottleneck.", Bottleneck)
    assert isinstance(result, Parsed) and result.value.kind == "memory"
    assert [m.role for m in result.conversation.messages] == ["user", "assistant"]
    assert provider.requests[0].conversation.system == "You profile kernels."


def test_ask_feeds_the_parse_error_back_and_keeps_the_whole_history() -> None:
    client, provider = scripted_client(["garbage", '```json\n{"kind": "memory"}\n```', GOOD_BOTTLENECK])
    result = ask(client, Conversation(system="sys"), "Name the bottleneck.", Bottleneck, repairs=2)
    assert isinstance(result, Parsed)
    sent = [r.conversation.messages for r in provider.requests]
    assert [len(m) for m in sent] == [1, 3, 5]  # the full history every time
    assert "no ```json fenced block" in sent[1][2].content and sent[1][1].content == "garbage"
    assert "missing field(s) evidence, confidence" in sent[2][4].content
    assert len(client.ledger.records) == 3


def test_ask_ends_in_a_typed_failure_after_the_allowed_repairs() -> None:
    client, provider = scripted_client(["junk 1", "junk 2", "junk 3", GOOD_BOTTLENECK])
    result = ask(client, Conversation(), "Name the bottleneck.", Bottleneck, repairs=1)
    assert isinstance(result, StructuredFailure)
    assert result.status == "malformed_reply" and result.reply_type == "Bottleneck"
    assert len(result.errors) == 2 and result.last_reply == "junk 2"
    assert len(provider.requests) == 2
    assert StructuredFailure.model_validate_json(result.model_dump_json()) == result


def test_ask_lets_a_failed_call_through_as_a_typed_error() -> None:
    client, _ = scripted_client([TransportError("auth_error", "HTTP 401: bad key", http_status=401)])
    with pytest.raises(LLMCallError) as raised:
        ask(client, Conversation(), "Name the bottleneck.", Bottleneck)
    assert raised.value.status == "auth_error"
