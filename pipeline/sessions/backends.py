"""A session's backend, as stored (a small JSON value) and as built in the worker (a Backend on a real transport)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.agents.backend import Backend, ModelBackend, PersonBackend
from pipeline.config import CUSTOM_KEY_VARIABLE, KEY_VARIABLES, ConfigError, LLMConfig, key_variable
from pipeline.llm.accounting import Ledger
from pipeline.llm.client import CallSettings, LLMClient, open_client, open_transport
from pipeline.llm.retry import RetryPolicy
from pipeline.llm.spec import SpecError, parse_spec
from pipeline.llm.transport import RetryingTransport, Transport
from pipeline.stages.resume import StoreTransport
from pipeline.stages.script import AgentScript
from pipeline.store import Store

BACKEND_KINDS = ("llm", "script", "expert", "none")
MODEL_KEY_VARIABLES = (*KEY_VARIABLES.values(), CUSTOM_KEY_VARIABLE)


class BackendError(ValueError):
    """A backend that cannot be built (no model configured, a missing key, an unusable script)."""


@dataclass(frozen=True)
class BackendSpec:
    """`llm` (a model spec, keys from the environment or config), `script` (a YAML file of replies), `expert`
    (egg's rules, no model) or `none` (a person writes every kernel)."""

    kind: str
    spec: str = ""  # the model spec (llm) or the script's path (script)
    config: str = ""  # the egg.yaml the model's settings come from (llm; keys still come from the environment)

    def __post_init__(self) -> None:
        if self.kind not in BACKEND_KINDS:
            raise BackendError(f"backend must be one of {', '.join(BACKEND_KINDS)}, not {self.kind!r}")
        if self.kind in ("llm", "script") and not self.spec:
            raise BackendError(f"a {self.kind} backend needs its {'model spec' if self.kind == 'llm' else 'script file'}")

    def check(self) -> None:
        """Fail now, with the reason, if a worker could not build this backend (a bad spec, a missing key or
        script): a session is not created for a backend that cannot run."""
        if self.kind == "llm":
            try:
                open_client(_llm_config(self))
            except ConfigError as error:
                raise BackendError(str(error)) from None
        elif self.kind == "script":
            try:
                AgentScript.load(Path(self.spec))
            except ValueError as error:
                raise BackendError(str(error)) from None

    def key_variable(self) -> str | None:
        """The one environment variable holding the key this backend's model needs; None for every other backend."""
        if self.kind != "llm":
            return None
        try:
            return key_variable(parse_spec(self.spec))
        except SpecError:
            return None

    def describe(self) -> str:
        return {"llm": self.spec, "script": f"script {Path(self.spec).name}", "expert": "expert backend (no model)",
                "none": "none (a person writes the kernels)"}[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "spec": self.spec, "config": self.config, "describe": self.describe()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BackendSpec:
        return cls(data["kind"], data.get("spec", ""), data.get("config", ""))


@dataclass
class BuiltBackend:
    backend: Backend
    ledger: Ledger
    transport: StoreTransport | None  # replays the session's stored model replies


def build_backend(spec: BackendSpec, store: Store, session_id: str, problem_name: str, llm_config: LLMConfig | None = None,
                  problem_source: str | None = None) -> BuiltBackend:
    """The backend for one session, on a transport that keeps every model exchange in the store (and replays it).
    The expert's rules are given the session's problem (`problem_source`): its stage-2 calls see only kernels."""
    if spec.kind == "none":
        return BuiltBackend(PersonBackend(), Ledger(), None)
    if spec.kind == "expert":
        from pipeline.expert.backend import ExpertBackend  # noqa: PLC0415 (the expert backend is optional weight)

        return BuiltBackend(ExpertBackend(problem_source), Ledger(), None)
    if spec.kind == "script":
        try:
            script = AgentScript.load(Path(spec.spec))
        except ValueError as error:
            raise BackendError(str(error)) from None
        inner: Transport = RetryingTransport(script, RetryPolicy(jitter=0), 1, sleep=lambda _: None)
        settings = CallSettings(spec=parse_spec("openai:scripted"), max_tokens=8192)
        ledger, on_replay = Ledger(), script.skip
    else:
        config = llm_config or _llm_config(spec)
        try:
            base = open_client(config)
        except ConfigError as error:  # a missing key, named
            raise BackendError(str(error)) from None
        inner, settings, ledger, on_replay = open_transport(config, config.spec), base.settings, base.ledger, None
    transport = StoreTransport(inner, store, session_id, on_replay)
    client = LLMClient(transport, settings, ledger).labelled(run=session_id, problem=problem_name)
    model = ModelBackend(client, spec.describe(), asks_again_on_repeat=spec.kind == "llm")  # a script's replies keep their order
    if spec.kind == "llm":  # a model's multi-seed search always holds one kernel made by rules (its last seed)
        from pipeline.expert.backend import ExpertBackend  # noqa: PLC0415
        from pipeline.expert.combined import WithExpertSeeds

        return BuiltBackend(WithExpertSeeds(model, ExpertBackend(problem_source)), ledger, transport)
    return BuiltBackend(model, ledger, transport)


def _llm_config(spec: BackendSpec) -> LLMConfig:
    from pipeline.config import load_config

    try:
        return load_config(Path(spec.config) if spec.config else None, llm_spec=spec.spec).llm
    except ConfigError as error:
        raise BackendError(str(error)) from None


def default_backend(config_path: str = "") -> BackendSpec:
    """A model when one is configured (EGG_LLM or the config file), else the expert backend. A broken config is an
    error, not a reason to fall back; the caller announces the expert backend."""
    from pipeline.config import load_config

    try:
        config = load_config(Path(config_path) if config_path else None)
    except ConfigError as error:
        raise BackendError(str(error)) from None
    return BackendSpec("llm", str(config.llm.spec), config_path) if config.llm.spec is not None else BackendSpec("expert")


def worker_environment(spec: BackendSpec, environ: dict[str, str]) -> dict[str, str]:
    """`environ` with no model key but the one `spec` calls its model with: a session's worker holds only its own
    provider's key, and an expert, scripted or person's session none at all."""
    keep = spec.key_variable()
    return {name: value for name, value in environ.items() if name not in MODEL_KEY_VARIABLES or name == keep}
