"""egg's configuration: one typed tree, read from YAML, with the environment read here and nowhere else.

Sources, strongest first: command-line flags (passed to `load_config`), environment variables, the YAML file
(`--config PATH`, else `./egg.yaml` if present), the defaults below. Unknown keys are errors. A later section is
one more `_Section` subclass and one field on `EggConfig`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError, model_validator

from pipeline.llm.accounting import Price
from pipeline.llm.spec import ModelSpec, SpecError, parse_spec

DEFAULT_CONFIG_FILE = "egg.yaml"
SPEC_VARIABLE = "EGG_LLM"
# The key for each hosted provider. A server at a custom base URL gets EGG_LLM_API_KEY (or llm.api_key) only:
# a provider's real key is never sent to some other host.
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
CUSTOM_KEY_VARIABLE = "EGG_LLM_API_KEY"
CONFIGURE_HINT = f"pass --llm PROVIDER:MODEL[@BASE_URL], set {SPEC_VARIABLE}, or set llm.spec in {DEFAULT_CONFIG_FILE}"


class ConfigError(Exception):
    """A configuration fault: the message is one line that says what is wrong and how to fix it."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _spec_from_text(value: Any) -> Any:
    return parse_spec(value) if isinstance(value, str) else value


def _yaml_off(value: Any) -> Any:
    return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false


class RetryConfig(_Section):
    """Retries on 429, 5xx, connection errors and timeouts (see pipeline.llm.retry.RetryPolicy)."""

    max_attempts: int = Field(default=4, ge=1, le=20)
    base_delay_s: float = Field(default=1.0, ge=0)
    max_delay_s: float = Field(default=30.0, ge=0)
    jitter: float = Field(default=0.25, ge=0, lt=1)
    max_retry_after_s: float = Field(default=120.0, ge=0)


class CassetteConfig(_Section):
    """Record every exchange to `path`, or replay from it offline."""

    mode: Annotated[Literal["off", "record", "replay"], BeforeValidator(_yaml_off)] = "off"
    path: Path | None = None

    @model_validator(mode="after")
    def _path_when_on(self) -> CassetteConfig:
        if self.mode != "off" and self.path is None:
            raise ValueError(f"cassette mode {self.mode!r} needs a path")
        return self


class LLMConfig(_Section):
    """The language model egg's agents talk to, and how."""

    spec: Annotated[ModelSpec | None, BeforeValidator(_spec_from_text)] = None
    api_key: SecretStr | None = None  # else taken from the environment (see KEY_VARIABLES)
    timeout_s: float = Field(default=300.0, gt=0)  # per attempt
    retry: RetryConfig = RetryConfig()
    concurrency: int = Field(default=4, ge=1)  # requests in flight per provider
    max_tokens: int = Field(default=8192, gt=0)
    temperature: float | None = Field(default=None, ge=0)  # None: the server's default
    structured_repairs: int = Field(default=2, ge=0)  # times a malformed reply is sent back before giving up
    prices: dict[str, Price] = {}  # "provider:model" or "model" -> USD per million tokens; extends the defaults
    cassette: CassetteConfig = CassetteConfig()
    calls_log: Path | None = None  # append every call record to this JSONL file


class BenchConfig(_Section):
    """Per-problem budgets of `egg bench` (its flags override them)."""

    max_wall_s: float | None = Field(default=None, gt=0)  # each problem's session (re-verification included)
    max_llm_calls: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)
    timeout_s: float | None = Field(default=None, gt=0)  # a worker still running after this is a hang


class EggConfig(_Section):
    """The whole configuration."""

    llm: LLMConfig = LLMConfig()
    bench: BenchConfig = BenchConfig()


def load_config(
    path: Path | None = None, *, llm_spec: str | None = None, environ: Mapping[str, str] | None = None
) -> EggConfig:
    """Read the YAML file, apply the environment and `llm_spec` (a --llm flag), and validate the result."""
    environ = os.environ if environ is None else environ
    try:
        config = EggConfig.model_validate(_read_yaml(path))
    except ValidationError as error:
        raise ConfigError(f"{path or DEFAULT_CONFIG_FILE}: {_first_problem(error)}") from None
    spec = _override_spec(llm_spec, "--llm") or _override_spec(environ.get(SPEC_VARIABLE), SPEC_VARIABLE)
    if spec is not None:
        config = config.model_copy(update={"llm": config.llm.model_copy(update={"spec": spec})})
    return _with_environment_key(config, environ)


def _override_spec(text: str | None, source: str) -> ModelSpec | None:
    if not text:
        return None
    try:
        return parse_spec(text)
    except SpecError as error:
        raise ConfigError(f"{source}: {error}") from None


def key_variable(spec: ModelSpec) -> str:
    """The environment variable that holds the key for `spec`."""
    return KEY_VARIABLES[spec.provider] if spec.is_hosted else CUSTOM_KEY_VARIABLE


def _with_environment_key(config: EggConfig, environ: Mapping[str, str]) -> EggConfig:
    llm = config.llm
    if llm.spec is None or llm.api_key is not None:
        return config
    key = environ.get(key_variable(llm.spec))
    if not key:
        return config
    return config.model_copy(update={"llm": llm.model_copy(update={"api_key": SecretStr(key)})})


def _read_yaml(path: Path | None) -> Any:
    if path is None:
        path = Path(DEFAULT_CONFIG_FILE)
        if not path.is_file():
            return {}
    elif not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(data).__name__}")
    return data


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "extra_forbidden":
        return f"unknown key {where!r}"
    message = problem["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
