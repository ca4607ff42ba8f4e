"""The one interface every provider implements, and how a provider is chosen for a spec."""

from __future__ import annotations

from typing import Protocol

from pipeline.llm.chat import ChatRequest, ChatResponse
from pipeline.llm.spec import ModelSpec

# Sent to servers at a custom base URL that were given no key: the SDKs insist on one, local servers ignore it.
NO_KEY = "no-key"


class Provider(Protocol):
    """Sends one request once. Raises TransportError (a typed failure) and nothing else on purpose."""

    def complete(self, request: ChatRequest) -> ChatResponse: ...


def open_provider(spec: ModelSpec, api_key: str | None, timeout_s: float) -> Provider:
    """The provider for `spec`, talking through its official SDK with the SDK's own retries off."""
    if spec.provider == "openai":
        from pipeline.llm.openai_provider import OpenAIProvider

        return OpenAIProvider(spec, api_key, timeout_s)
    from pipeline.llm.anthropic_provider import AnthropicProvider

    return AnthropicProvider(spec, api_key, timeout_s)
