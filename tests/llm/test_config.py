from pathlib import Path

import pytest

from pipeline.config import ConfigError, EggConfig, load_config
from pipeline.llm.client import open_client
from pipeline.llm.spec import ModelSpec

NO_ENV: dict[str, str] = {}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "egg.yaml"
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(environ=NO_ENV)
    assert config == EggConfig()
    assert config.llm.spec is None


def test_yaml_file_is_read_and_typed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
llm:
  spec: openai:qwen@http://127.0.0.1:8000/v1
  timeout_s: 30
  retry: {max_attempts: 2, base_delay_s: 0.5}
  prices:
    qwen: {input_usd_per_mtok: 0, output_usd_per_mtok: 0}
  cassette: {mode: record, path: run.cassette.jsonl}
""",
    )
    llm = load_config(path, environ=NO_ENV).llm
    assert llm.spec == ModelSpec(provider="openai", model="qwen", base_url="http://127.0.0.1:8000/v1")
    assert (llm.timeout_s, llm.retry.max_attempts, llm.retry.base_delay_s) == (30, 2, 0.5)
    assert llm.prices["qwen"].output_usd_per_mtok == 0
    assert llm.cassette.path == Path("run.cassette.jsonl")


def test_egg_yaml_in_the_working_directory_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "llm: {spec: 'anthropic:claude-opus-4-5'}\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(environ=NO_ENV).llm.spec == ModelSpec(provider="anthropic", model="claude-opus-4-5")


def test_a_bare_yaml_off_means_off(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "llm: {cassette: {mode: off}}\n"), environ=NO_ENV).llm.cassette.mode == "off"


def test_spec_may_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "llm: {spec: {provider: openai, model: m, base_url: 'http://h:1/v1'}}\n")
    assert load_config(path, environ=NO_ENV).llm.spec == ModelSpec(
        provider="openai", model="m", base_url="http://h:1/v1"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("llm: {retyr: {}}\n", "unknown key 'llm.retyr'"),
        ("lmm: {}\n", "unknown key 'lmm'"),
        ("llm: {retry: {max_attempts: 0}}\n", "llm.retry.max_attempts"),
        ("llm: {spec: 'google:gemini'}\n", "unknown provider 'google'"),
        ("llm: {cassette: {mode: replay}}\n", "cassette mode 'replay' needs a path"),
        ("llm: {cassette: {mode: rewind, path: x}}\n", "llm.cassette.mode"),
        ("- a\n- b\n", "expected a mapping"),
        ("llm: {spec: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(write(tmp_path, text), environ=NO_ENV)


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ=NO_ENV)


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    path = write(tmp_path, "llm: {spec: 'openai:from-file'}\n")
    env = {"EGG_LLM": "openai:from-env"}
    assert load_config(path, environ=NO_ENV).llm.spec.model == "from-file"
    assert load_config(path, environ=env).llm.spec.model == "from-env"
    assert load_config(path, llm_spec="openai:from-flag", environ=env).llm.spec.model == "from-flag"


def test_bad_spec_in_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"EGG_LLM: .*no provider"):
        load_config(environ={"EGG_LLM": "gpt-5.1"})


def test_key_comes_from_the_provider_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    llm = load_config(llm_spec="anthropic:claude-opus-4-5", environ={"ANTHROPIC_API_KEY": "sk-ant"}).llm
    assert llm.api_key is not None and llm.api_key.get_secret_value() == "sk-ant"
    assert "sk-ant" not in repr(llm)


def test_missing_key_for_a_hosted_provider_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for spec, variable in [("openai:gpt-5.1", "OPENAI_API_KEY"), ("anthropic:claude-opus-4-5", "ANTHROPIC_API_KEY")]:
        llm = load_config(llm_spec=spec, environ={"OPENAI_API_KEY": "", "EGG_LLM_API_KEY": "x"}).llm
        with pytest.raises(ConfigError, match=f"no API key for {spec}: set {variable}"):
            open_client(llm)


def test_custom_server_needs_no_key_and_never_gets_the_providers_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = "openai:qwen@http://127.0.0.1:8000/v1"
    llm = load_config(llm_spec=spec, environ={"OPENAI_API_KEY": "sk-real"}).llm
    assert llm.api_key is None
    open_client(llm)  # no error: local servers need no key
    llm = load_config(llm_spec=spec, environ={"EGG_LLM_API_KEY": "local-token"}).llm
    assert llm.api_key.get_secret_value() == "local-token"


def test_no_llm_configured_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="no LLM configured: pass --llm"):
        open_client(load_config(environ=NO_ENV).llm)


def test_config_round_trips_through_json(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), llm_spec="openai:m@http://h:1/v1", environ=NO_ENV)
    assert EggConfig.model_validate_json(config.model_dump_json()) == config
