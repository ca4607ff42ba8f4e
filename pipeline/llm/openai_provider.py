"""OpenAI Chat Completions, which OpenAI and every compatible server (vLLM, SGLang, Ollama, llama.cpp) speak."""

from __future__ import annotations

from typing import Any

import openai

from pipeline.llm.chat import ChatRequest, ChatResponse, Usage
from pipeline.llm.errors import TransportError, classify_http_error
from pipeline.llm.provider import NO_KEY
from pipeline.llm.retry import parse_retry_after
from pipeline.llm.spec import ModelSpec

OPENAI_URL = "https://api.openai.com/v1"


class OpenAIProvider:
    """One model behind a Chat Completions endpoint."""

    def __init__(self, spec: ModelSpec, api_key: str | None, timeout_s: float) -> None:
        self._spec = spec
        self._client = openai.OpenAI(
            api_key=api_key or NO_KEY, base_url=spec.base_url or OPENAI_URL, timeout=timeout_s, max_retries=0
        )

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the whole conversation once; SDK errors become TransportError."""
        try:
            completion = self._client.chat.completions.create(**request_body(request))
        except openai.APIStatusError as error:
            raise _status_error(error) from error
        except openai.APITimeoutError as error:
            raise TransportError("timeout", "no reply within the timeout") from error
        except openai.APIConnectionError as error:
            raise TransportError("connection_error", _cause(error)) from error
        except openai.APIError as error:  # e.g. a 2xx body the SDK could not read
            raise TransportError("protocol_error", str(error)) from error
        return _response(completion)


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body of a chat completion for `request`."""
    conversation = request.conversation
    messages = [{"role": "system", "content": conversation.system}] if conversation.system else []
    messages += [{"role": m.role, "content": m.content} for m in conversation.messages]
    # OpenAI's newer models accept only max_completion_tokens; some compatible servers only max_tokens.
    limit_name = "max_completion_tokens" if request.spec.is_hosted else "max_tokens"
    body: dict[str, Any] = {"model": request.spec.model, "messages": messages, limit_name: request.max_tokens}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _response(completion: Any) -> ChatResponse:
    try:
        choice = completion.choices[0]
        return ChatResponse(
            text=choice.message.content or "",
            usage=_usage(completion.usage),
            finish_reason=choice.finish_reason,
            model=completion.model or "",
        )
    except (AttributeError, IndexError, TypeError, ValueError) as error:
        raise TransportError("protocol_error", f"unreadable chat completion: {error}") from error


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens, cached_input_tokens=cached)


def _status_error(error: openai.APIStatusError) -> TransportError:
    message = _message(error)
    return TransportError(
        classify_http_error(error.status_code, message),
        f"HTTP {error.status_code}: {message}",
        http_status=error.status_code,
        retry_after_s=parse_retry_after(error.response.headers),
    )


def _message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            kind = inner.get("type") or inner.get("code")
            return f"{inner['message']} ({kind})" if kind else str(inner["message"])
    return error.message


def _cause(error: openai.APIConnectionError) -> str:
    cause = error.__cause__ or error.__context__
    return f"{error.message.rstrip('.')} ({cause})" if cause else error.message
