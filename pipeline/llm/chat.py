"""The values a conversation is made of: messages, requests, replies. Plain dicts only at the HTTP edge."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.llm.spec import ModelSpec

Role = Literal["user", "assistant"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(_Frozen):
    """One turn. The system prompt is not a message: it travels beside them (providers differ)."""

    role: Role
    content: str


class Conversation(_Frozen):
    """A system prompt and the full history; every request sends all of it."""

    system: str = ""
    messages: tuple[Message, ...] = ()

    def with_user(self, content: str) -> Conversation:
        """This conversation plus one user turn."""
        return self.model_copy(update={"messages": (*self.messages, Message(role="user", content=content))})

    def with_assistant(self, content: str) -> Conversation:
        """This conversation plus one assistant turn."""
        return self.model_copy(update={"messages": (*self.messages, Message(role="assistant", content=content))})


class ChatRequest(_Frozen):
    """Everything that decides a reply. `spec.base_url` is where it goes, not what it asks."""

    spec: ModelSpec
    conversation: Conversation
    max_tokens: int = Field(gt=0)
    temperature: float | None = None

    def canonical(self) -> dict[str, Any]:
        """The request as data: provider, model, system, messages, params. No base URL, no secrets."""
        return {
            "provider": self.spec.provider,
            "model": self.spec.model,
            "system": self.conversation.system,
            "messages": [m.model_dump() for m in self.conversation.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def key(self) -> str:
        """sha256 of the canonical request: the same question gives the same key on any server."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


class Usage(_Frozen):
    """Tokens as the server counted them. `input_tokens` counts the whole prompt, cached part included."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)  # the part of input_tokens read from a prompt cache


class ChatResponse(_Frozen):
    """A reply. `finish_reason` is the provider's word (stop, length, end_turn, max_tokens, ...)."""

    text: str
    usage: Usage
    finish_reason: str | None
    model: str  # as the server named it
