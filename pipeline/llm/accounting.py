"""What every call cost: tokens, latency, attempts and USD, kept per call and totalled by any label."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.llm.chat import Usage


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Price(_Frozen):
    """USD per million tokens. Cached prompt tokens cost the input price unless a cached price is given."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)
    cached_input_usd_per_mtok: float | None = Field(default=None, ge=0)


# List prices in USD per million tokens (input, cached input, output), checked 2025-11. Anthropic's cache writes
# (1.25x input) are charged at the input price. Override or extend them with `llm.prices` in egg.yaml.
DEFAULT_PRICES: dict[str, Price] = {
    name: Price(input_usd_per_mtok=fresh, cached_input_usd_per_mtok=cached, output_usd_per_mtok=out)
    for name, (fresh, cached, out) in {
        "openai:gpt-5.1": (1.25, 0.125, 10.0),
        "openai:gpt-5": (1.25, 0.125, 10.0),
        "openai:gpt-5-mini": (0.25, 0.025, 2.0),
        "openai:gpt-4.1": (2.0, 0.5, 8.0),
        "openai:gpt-4o": (2.5, 1.25, 10.0),
        "anthropic:claude-opus-4-5": (5.0, 0.5, 25.0),
        "anthropic:claude-sonnet-4-5": (3.0, 0.3, 15.0),
        "anthropic:claude-haiku-4-5": (1.0, 0.1, 5.0),
    }.items()
}


class PriceTable:
    """Prices keyed `provider:model` (or a bare model name, which matches any provider)."""

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self._prices = {**DEFAULT_PRICES, **(overrides or {})}

    def price(self, provider: str, model: str) -> Price | None:
        """The price of a model, or None when none is known (the cost is then unknown, not zero)."""
        return self._prices.get(f"{provider}:{model}") or self._prices.get(model)

    def cost_usd(self, provider: str, model: str, usage: Usage) -> float | None:
        """USD for `usage`, or None when the model has no price."""
        price = self.price(provider, model)
        if price is None:
            return None
        cached_price = price.cached_input_usd_per_mtok
        if cached_price is None:
            cached_price = price.input_usd_per_mtok
        fresh = usage.input_tokens - usage.cached_input_tokens
        usd = fresh * price.input_usd_per_mtok + usage.cached_input_tokens * cached_price
        return (usd + usage.output_tokens * price.output_usd_per_mtok) / 1e6


class CallLabels(_Frozen):
    """Where a call belongs; the ledger totals by each of these."""

    run: str | None = None
    problem: str | None = None
    stage: str | None = None
    agent: str | None = None


class Attempt(_Frozen):
    """One try at a request. `wait_s` is how long we slept after it before the next try."""

    number: int = Field(ge=1)
    status: str  # "ok" or a FailureStatus
    latency_s: float = Field(ge=0)
    http_status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None
    wait_s: float = 0.0


class CallRecord(CallLabels):
    """One call to a model, failed or not, with every attempt. The run store keeps exactly these."""

    started_at: str  # ISO 8601, UTC
    provider: str
    model: str
    base_url: str | None
    request_key: str  # ChatRequest.key(): the cassette key
    status: str  # "ok" or the FailureStatus of the last attempt
    error: str | None
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    latency_s: float = Field(ge=0)  # the whole call, retries and waits included
    cost_usd: float | None  # None: no price known for this model
    attempts: tuple[Attempt, ...]
    replayed: bool = False  # served from a cassette; tokens and cost are those of the recording


LabelName = Literal["run", "problem", "stage", "agent", "provider", "model", "status"]


class Totals(_Frozen):
    """Sums over a set of calls."""

    calls: int = 0
    failed_calls: int = 0
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0  # over priced calls only
    unpriced_calls: int = 0  # calls whose cost is unknown, so cost_usd is a lower bound when > 0


def total(records: Iterable[CallRecord]) -> Totals:
    """Totals over `records`."""
    records = list(records)
    return Totals(
        calls=len(records),
        failed_calls=sum(r.status != "ok" for r in records),
        attempts=sum(len(r.attempts) for r in records),
        input_tokens=sum(r.input_tokens for r in records),
        output_tokens=sum(r.output_tokens for r in records),
        latency_s=sum(r.latency_s for r in records),
        cost_usd=sum(r.cost_usd for r in records if r.cost_usd is not None),
        unpriced_calls=sum(r.cost_usd is None for r in records),
    )


class Ledger:
    """Thread-safe list of call records, optionally mirrored line by line to a JSONL file as they arrive."""

    def __init__(self, sink_path: Path | None = None) -> None:
        self._records: list[CallRecord] = []
        self._lock = threading.Lock()
        self._sink_path = sink_path

    def add(self, record: CallRecord) -> None:
        """Keep `record` (and append it to the sink, flushed to disk, before returning)."""
        with self._lock:
            self._records.append(record)
            if self._sink_path is not None:
                append_record(self._sink_path, record)

    @property
    def records(self) -> tuple[CallRecord, ...]:
        """Every record so far, in arrival order."""
        with self._lock:
            return tuple(self._records)

    def total(self) -> Totals:
        """Totals over every record."""
        return total(self.records)

    def totals(self, by: LabelName) -> dict[str | None, Totals]:
        """Totals per value of one label (None collects unlabelled calls)."""
        groups: dict[str | None, list[CallRecord]] = {}
        for record in self.records:
            groups.setdefault(getattr(record, by), []).append(record)
        return {key: total(group) for key, group in groups.items()}


def append_record(path: Path, record: CallRecord) -> None:
    """Append one record as a JSON line and fsync, so a crash loses nothing already returned."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(record.model_dump_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_records(path: Path) -> list[CallRecord]:
    """The records of a JSONL file written by `append_record`."""
    with path.open(encoding="utf-8") as handle:
        return [CallRecord.model_validate_json(line) for line in handle if line.strip()]
