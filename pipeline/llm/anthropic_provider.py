"""Anthropic Messages (also served by llama.cpp's server at /v1/messages)."""

from __future__ import annotations

from typing import Any

import anthropic

from pipeline.llm.chat import ChatRequest, ChatResponse, Usage
from pipeline.llm.errors import TransportError, classify_http_error
from pipeline.llm.provider import NO_KEY
from pipeline.llm.retry import parse_retry_after
from pipeline.llm.spec import ModelSpec

ANTHROPIC_URL = "https://api.anthropic.com"


class AnthropicProvider:
    """One model behind a Messages endpoint."""

    def __init__(self, spec: ModelSpec, api_key: str | None, timeout_s: float) -> None:
        self._client = anthropic.Anthropic(
            api_key=api_key or NO_KEY, base_url=_root_url(spec.base_url), timeout=timeout_s, max_retries=0
        )

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the whole conversation once; SDK errors become TransportError."""
        try:
            message = self._client.messages.create(**request_body(request))
        except anthropic.APIStatusError as error:
            raise _status_error(error) from error
        except anthropic.APITimeoutError as error:
            raise TransportError("timeout", "no reply within the timeout") from error
        except anthropic.APIConnectionError as error:
            raise TransportError("connection_error", _cause(error)) from error
        except anthropic.APIError as error:  # e.g. a 2xx body the SDK could not read
            raise TransportError("protocol_error", str(error)) from error
        return _response(message)


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body of a Messages request for `request`."""
    conversation = request.conversation
    body: dict[str, Any] = {
        "model": request.spec.model,
        "max_tokens": request.max_tokens,
        "messages": [{"role": m.role, "content": m.content} for m in conversation.messages],
    }
    if conversation.system:
        body["system"] = conversation.system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _root_url(base_url: str | None) -> str:
    # The SDK appends /v1/messages itself; accept the /v1 that OpenAI-style URLs carry so one spec fits both.
    if base_url is None:
        return ANTHROPIC_URL
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _response(message: Any) -> ChatResponse:
    try:
        text = "".join(block.text for block in message.content if block.type == "text")
        return ChatResponse(
            text=text, usage=_usage(message.usage), finish_reason=message.stop_reason, model=message.model or ""
        )
    except (AttributeError, TypeError, ValueError) as error:
        raise TransportError("protocol_error", f"unreadable message: {error}") from error


def _usage(usage: Any) -> Usage:
    # Anthropic counts cache reads and writes apart from input_tokens; egg's input_tokens is the whole prompt.
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Usage(
        input_tokens=usage.input_tokens + read + written, output_tokens=usage.output_tokens, cached_input_tokens=read
    )


def _cause(error: anthropic.APIConnectionError) -> str:
    cause = error.__cause__ or error.__context__
    return f"{error.message.rstrip('.')} ({cause})" if cause else error.message


def _status_error(error: anthropic.APIStatusError) -> TransportError:
    message = error.message
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        inner = body["error"]
        message = f"{inner['message']} ({inner['type']})" if inner.get("type") else str(inner["message"])
    return TransportError(
        classify_http_error(error.status_code, message),
        f"HTTP {error.status_code}: {message}",
        http_status=error.status_code,
        retry_after_s=parse_retry_after(error.response.headers),
    )
