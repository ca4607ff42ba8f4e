from pathlib import Path

import pytest

from pipeline.llm.accounting import Attempt, CallRecord, Ledger, Price, PriceTable, read_records
from pipeline.llm.chat import Conversation, Usage
from pipeline.llm.errors import LLMCallError, TransportError
from pipeline.llm.scripted import scripted_client


def record(
    stage: str, agent: str, tokens_in: int, tokens_out: int, cost: float | None, status: str = "ok"
) -> CallRecord:
    return CallRecord(
        run="r1",
        problem="23_Softmax",
        stage=stage,
        agent=agent,
        started_at="2026-11-29T00:00:00.000+00:00",
        provider="openai",
        model="gpt-5.1",
        base_url=None,
        request_key="k",
        status=status,
        error=None if status == "ok" else "boom",
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        latency_s=1.5,
        cost_usd=cost,
        attempts=(Attempt(number=1, status=status, latency_s=1.5),),
    )


def test_cost_from_the_price_table() -> None:
    prices = PriceTable()
    assert prices.cost_usd("openai", "gpt-5.1", Usage(input_tokens=1_000_000, output_tokens=100_000)) == pytest.approx(
        2.25
    )
    assert prices.cost_usd("openai", "qwen-local", Usage(input_tokens=5, output_tokens=5)) is None  # unknown, not 0


def test_cached_prompt_tokens_cost_the_cached_price() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=0, cached_input_tokens=800_000)
    assert PriceTable().cost_usd("anthropic", "claude-opus-4-5", usage) == pytest.approx(0.2 * 5.0 + 0.8 * 0.5)
    no_cache_price = PriceTable({"m": Price(input_usd_per_mtok=2, output_usd_per_mtok=0)})
    assert no_cache_price.cost_usd("openai", "m", usage) == pytest.approx(2.0)


def test_configured_prices_extend_and_override() -> None:
    prices = PriceTable(
        {
            "qwen-local": Price(input_usd_per_mtok=0, output_usd_per_mtok=0),
            "openai:gpt-5.1": Price(input_usd_per_mtok=1, output_usd_per_mtok=1),
        }
    )
    assert prices.cost_usd("openai", "qwen-local", Usage(input_tokens=5, output_tokens=5)) == 0
    assert prices.cost_usd("openai", "gpt-5.1", Usage(input_tokens=500_000, output_tokens=500_000)) == 1.0
    assert prices.cost_usd("anthropic", "claude-opus-4-5", Usage(input_tokens=1_000_000, output_tokens=0)) == 5.0


def test_ledger_totals_by_any_label() -> None:
    ledger = Ledger()
    for r in [
        record("seeds", "code", 100, 10, 0.5),
        record("seeds", "debug", 50, 5, None),
        record("tiling", "code", 10, 1, 0.25, status="timeout"),
    ]:
        ledger.add(r)
    total = ledger.total()
    assert (total.calls, total.failed_calls, total.input_tokens, total.output_tokens) == (3, 1, 160, 16)
    assert total.cost_usd == 0.75 and total.unpriced_calls == 1 and total.latency_s == 4.5
    by_stage = ledger.totals("stage")
    assert set(by_stage) == {"seeds", "tiling"} and by_stage["seeds"].calls == 2
    assert ledger.totals("agent")["code"].cost_usd == 0.75
    assert ledger.totals("run")["r1"].calls == 3


def test_call_record_is_frozen_and_round_trips_through_json() -> None:
    r = record("seeds", "code", 1, 2, 0.1)
    assert CallRecord.model_validate_json(r.model_dump_json()) == r
    with pytest.raises(Exception, match="frozen"):
        r.status = "timeout"  # type: ignore[misc]


def test_every_call_is_recorded_with_labels_and_mirrored_to_jsonl(tmp_path: Path) -> None:
    sink = tmp_path / "calls.jsonl"
    script = ["one two three", TransportError("bad_request", "HTTP 400: nope", http_status=400)]
    client, _ = scripted_client(script, ledger=Ledger(sink))
    coder = client.labelled(run="r1").labelled(problem="p1", stage="seeds", agent="code")
    coder.complete(Conversation().with_user("hello there"))
    with pytest.raises(LLMCallError):
        coder.labelled(agent="debug").complete(Conversation().with_user("again"))
    records = read_records(sink)
    assert records == list(client.ledger.records)
    ok, failed = records
    assert (ok.run, ok.problem, ok.stage, ok.agent, ok.status) == ("r1", "p1", "seeds", "code", "ok")
    assert (ok.input_tokens, ok.output_tokens, ok.cost_usd) == (2, 3, None)
    assert (failed.agent, failed.status, failed.error, failed.input_tokens) == (
        "debug",
        "bad_request",
        "HTTP 400: nope",
        0,
    )
    assert failed.attempts[0].http_status == 400
