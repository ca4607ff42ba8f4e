import pytest

from pipeline.llm.spec import ModelSpec, SpecError, parse_spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("openai:gpt-5.1", ModelSpec(provider="openai", model="gpt-5.1")),
        ("anthropic:claude-opus-4-5", ModelSpec(provider="anthropic", model="claude-opus-4-5")),
        (
            "openai:qwen2.5-coder-32b@http://localhost:8000/v1",
            ModelSpec(provider="openai", model="qwen2.5-coder-32b", base_url="http://localhost:8000/v1"),
        ),
        (
            "OpenAI:org/model:tag@https://host/v1/",
            ModelSpec(provider="openai", model="org/model:tag", base_url="https://host/v1"),
        ),
        ("openai:name@v2@http://h:1/v1", ModelSpec(provider="openai", model="name@v2", base_url="http://h:1/v1")),
    ],
)
def test_parse_spec_accepts_provider_model_and_base_url(text: str, expected: ModelSpec) -> None:
    assert parse_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("gpt-5.1", "no provider"),
        ("google:gemini", "unknown provider 'google'"),
        ("openai:", "no model name"),
        ("openai:@http://h/v1", "no model name"),
        ("openai:m@localhost:8000", "must start with http"),
        ("openai:m@http://", "no host"),
    ],
)
def test_parse_spec_rejects_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(SpecError, match=reason):
        parse_spec(text)


def test_spec_prints_back_as_written() -> None:
    text = "openai:qwen@http://127.0.0.1:8000/v1"
    assert str(parse_spec(text)) == text
    assert parse_spec("anthropic:claude-opus-4-5").is_hosted
    assert not parse_spec(text).is_hosted
