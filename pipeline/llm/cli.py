"""`egg llm ...` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.config import ConfigError, load_config
from pipeline.llm.accounting import CallRecord
from pipeline.llm.chat import Conversation
from pipeline.llm.client import open_client
from pipeline.llm.errors import CassetteMiss, LLMCallError

app = typer.Typer(help="Talk to the configured language model.", no_args_is_help=True)


@app.callback()
def llm_commands() -> None:
    """Talk to the configured language model."""


PING_PROMPT = "Reply with one short sentence: are you there?"


@app.command()
def ping(
    llm: Annotated[str | None, typer.Option("--llm", help="PROVIDER:MODEL\\[@BASE_URL], e.g. openai:gpt-5.1")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config (default: ./egg.yaml)")] = None,
    prompt: Annotated[str, typer.Option(help="What to send.")] = PING_PROMPT,
    max_tokens: Annotated[int, typer.Option(min=1, help="Reply length limit.")] = 64,
) -> None:
    """Send a short prompt; print the reply, tokens, latency and cost."""
    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    try:
        client = open_client(load_config(config, llm_spec=llm).llm)
    except (ConfigError, CassetteMiss) as error:
        err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
        raise typer.Exit(2) from None
    try:
        reply = client.complete(Conversation().with_user(prompt), max_tokens=max_tokens)
    except (LLMCallError, CassetteMiss) as error:
        err.print(f"[red]error:[/red] {escape(f'{client.settings.spec}: {error}')}", highlight=False)
        raise typer.Exit(1) from None
    out.print(f"[bold]{escape(str(client.settings.spec))}[/bold] replied:", highlight=False)
    out.print(reply.text.strip() or "(empty reply)", markup=False, highlight=False)
    out.print(_usage_line(client.ledger.records[-1], reply.finish_reason), highlight=False)


def _usage_line(record: CallRecord, finish_reason: str | None) -> str:
    cost = f"${record.cost_usd:.6f}" if record.cost_usd is not None else "unknown (no price for this model)"
    return (
        f"tokens: {record.input_tokens} in, {record.output_tokens} out | latency: {record.latency_s:.2f} s | "
        f"cost: {cost} | attempts: {len(record.attempts)} | finish: {finish_reason}"
    )
