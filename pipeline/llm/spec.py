"""Model specs: `PROVIDER:MODEL[@BASE_URL]`, e.g. `openai:gpt-5.1` or `openai:qwen@http://localhost:8000/v1`."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

ProviderName = Literal["openai", "anthropic"]
PROVIDERS: tuple[ProviderName, ...] = ("openai", "anthropic")
SPEC_FORMAT = "PROVIDER:MODEL[@BASE_URL]"


class SpecError(ValueError):
    """A model spec that cannot be used; the message says what is wrong and what is expected."""


class ModelSpec(BaseModel):
    """Which model to ask and where. `base_url` is None for the provider's hosted API."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: ProviderName
    model: str
    base_url: str | None = None

    @property
    def is_hosted(self) -> bool:
        """True when the request goes to the provider's own API (which needs its key)."""
        return self.base_url is None

    def __str__(self) -> str:
        suffix = f"@{self.base_url}" if self.base_url else ""
        return f"{self.provider}:{self.model}{suffix}"


def parse_spec(text: str) -> ModelSpec:
    """Parse `PROVIDER:MODEL[@BASE_URL]`; raise SpecError naming the problem."""
    text = text.strip()
    provider, sep, rest = text.partition(":")
    if not sep or not provider:
        raise SpecError(f"model spec {text!r} has no provider: expected {SPEC_FORMAT}, e.g. openai:gpt-5.1")
    provider = provider.lower()
    if provider not in PROVIDERS:
        raise SpecError(f"unknown provider {provider!r} in {text!r}: expected one of {', '.join(PROVIDERS)}")
    # Split on the first '@' followed by a URL scheme, so model names may contain '@' otherwise.
    model, base_url = _split_base_url(rest)
    if not model:
        raise SpecError(f"model spec {text!r} has no model name: expected {SPEC_FORMAT}")
    return ModelSpec(provider=provider, model=model, base_url=base_url)


def _split_base_url(rest: str) -> tuple[str, str | None]:
    for marker in ("@http://", "@https://"):
        index = rest.find(marker)
        if index >= 0:
            return rest[:index], _checked_url(rest[index + 1 :])
    if "@" in rest:
        url = rest.rpartition("@")[2]
        raise SpecError(f"base URL {url!r} in model spec must start with http:// or https://")
    return rest, None


def _checked_url(url: str) -> str:
    parsed = urlparse(url)
    if not parsed.netloc:
        raise SpecError(f"base URL {url!r} in model spec has no host")
    return url.rstrip("/")
