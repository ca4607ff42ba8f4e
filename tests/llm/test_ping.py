"""`egg llm ping`: through its typer app, and as the real `egg` command in a subprocess."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.llm.cli import app
from tests.llm.http_stub import forward_to, rate_limited

runner = CliRunner()
NO_LLM_ENV = {"EGG_LLM": "", "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""}


@pytest.fixture(autouse=True)
def _no_egg_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_ping_without_an_llm_says_how_to_configure_one() -> None:
    result = runner.invoke(app, ["ping"], env=NO_LLM_ENV)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: no LLM configured: pass --llm PROVIDER:MODEL[@BASE_URL], set EGG_LLM, or set llm.spec in egg.yaml"
    ]


def test_ping_with_a_missing_key_names_the_variable() -> None:
    result = runner.invoke(app, ["ping", "--llm", "anthropic:claude-opus-4-5"], env=NO_LLM_ENV)
    assert result.exit_code == 2
    assert "set ANTHROPIC_API_KEY" in result.output


def test_ping_survives_a_429_with_retry_after(llama_server, stub_server, tmp_path: Path) -> None:
    stub = stub_server([rate_limited(retry_after="1"), forward_to(llama_server.root)])
    command = [sys.executable, "-m", "pipeline.cli", "llm", "ping", "--llm", f"openai:any@{stub.url}", "--max-tokens", "16"]
    env = {**os.environ, **NO_LLM_ENV}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"openai:any@{stub.url} replied:" in result.stdout
    assert "attempts: 2" in result.stdout
    tokens_line = next(line for line in result.stdout.splitlines() if line.startswith("tokens:"))
    assert re.match(r"tokens: [1-9]\d* in, [1-9]\d* out \| latency: ", tokens_line)
    (first_path, first_at), (second_path, second_at) = stub.requests
    assert first_path == second_path == "/v1/chat/completions"
    assert second_at - first_at >= 1.0  # Retry-After honoured


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_ping_a_real_server(llama_server, provider: str) -> None:
    result = runner.invoke(app, ["ping", "--llm", f"{provider}:gemma@{llama_server.url}", "--max-tokens", "8"])
    assert result.exit_code == 0, result.output
    assert "attempts: 1" in result.output and "cost: unknown" in result.output
