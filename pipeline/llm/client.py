"""LLMClient: one configured model, asked with labels; every call, failed or not, becomes a CallRecord."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipeline.config import CONFIGURE_HINT, ConfigError, LLMConfig, key_variable
from pipeline.llm.accounting import CallLabels, CallRecord, Ledger, PriceTable
from pipeline.llm.cassette import RecordingTransport, ReplayTransport
from pipeline.llm.chat import ChatRequest, ChatResponse, Conversation
from pipeline.llm.errors import LLMCallError
from pipeline.llm.provider import open_provider
from pipeline.llm.retry import RetryPolicy
from pipeline.llm.spec import ModelSpec
from pipeline.llm.transport import Exchange, RetryingTransport, Transport

NO_LABELS = CallLabels()


@dataclass(frozen=True)
class CallSettings:
    """What a client puts into every request, and how it prices the replies."""

    spec: ModelSpec
    max_tokens: int
    temperature: float | None = None
    structured_repairs: int = 2
    prices: PriceTable = field(default_factory=PriceTable)


class LLMClient:
    """Asks one model. Clients made by `labelled` share the transport (and its concurrency limit) and the ledger."""

    def __init__(
        self,
        transport: Transport,
        settings: CallSettings,
        ledger: Ledger | None = None,
        labels: CallLabels = NO_LABELS,
    ) -> None:
        self._transport = transport
        self.settings = settings
        self.ledger = ledger if ledger is not None else Ledger()
        self.labels = labels

    def labelled(self, **labels: str | None) -> LLMClient:
        """The same client, with some labels (run, problem, stage, agent) replaced."""
        merged = CallLabels.model_validate({**self.labels.model_dump(), **labels})  # rejects unknown label names
        return LLMClient(self._transport, self.settings, self.ledger, merged)

    def complete(self, conversation: Conversation, *, max_tokens: int | None = None) -> ChatResponse:
        """The model's reply to the whole conversation. Raises LLMCallError once retries are spent."""
        request = ChatRequest(
            spec=self.settings.spec,
            conversation=conversation,
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature,
        )
        started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        exchange = self._transport.exchange(request)
        record = self._record(request, exchange, started_at)
        self.ledger.add(record)
        if exchange.response is None:
            raise LLMCallError(record)
        return exchange.response

    def _record(self, request: ChatRequest, exchange: Exchange, started_at: str) -> CallRecord:
        response = exchange.response
        spec = request.spec
        cost = self.settings.prices.cost_usd(spec.provider, spec.model, response.usage) if response else 0.0
        return CallRecord(
            **self.labels.model_dump(),
            started_at=started_at,
            provider=spec.provider,
            model=spec.model,
            base_url=exchange.base_url,
            request_key=request.key(),
            status=exchange.status,
            error=exchange.error,
            input_tokens=response.usage.input_tokens if response else 0,
            output_tokens=response.usage.output_tokens if response else 0,
            cached_input_tokens=response.usage.cached_input_tokens if response else 0,
            latency_s=exchange.latency_s,
            cost_usd=cost,
            attempts=exchange.attempts,
            replayed=exchange.replayed,
        )


def open_client(config: LLMConfig, *, labels: CallLabels = NO_LABELS, ledger: Ledger | None = None) -> LLMClient:
    """A client for the configured model. Raises ConfigError (one line, with a hint) when it cannot be made."""
    if config.spec is None:
        raise ConfigError(f"no LLM configured: {CONFIGURE_HINT}")
    settings = CallSettings(
        spec=config.spec,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        structured_repairs=config.structured_repairs,
        prices=PriceTable(config.prices),
    )
    ledger = ledger if ledger is not None else Ledger(config.calls_log)
    return LLMClient(open_transport(config, config.spec), settings, ledger, labels)


def open_transport(config: LLMConfig, spec: ModelSpec) -> Transport:
    """The transport for `spec`: replay from a cassette (offline, no key), or the network, maybe recorded."""
    cassette = config.cassette
    if cassette.mode == "replay":
        assert cassette.path is not None  # the config guarantees it
        return ReplayTransport(cassette.path)
    if spec.is_hosted and config.api_key is None:
        variable = key_variable(spec)
        raise ConfigError(f"no API key for {spec}: set {variable} (or llm.api_key in egg.yaml)")
    key = config.api_key.get_secret_value() if config.api_key else None
    retry = config.retry
    policy = RetryPolicy(
        max_attempts=retry.max_attempts,
        base_delay_s=retry.base_delay_s,
        max_delay_s=retry.max_delay_s,
        jitter=retry.jitter,
        max_retry_after_s=retry.max_retry_after_s,
    )
    transport: Transport = RetryingTransport(open_provider(spec, key, config.timeout_s), policy, config.concurrency)
    if cassette.mode == "record":
        assert cassette.path is not None
        transport = RecordingTransport(transport, cassette.path)
    return transport
