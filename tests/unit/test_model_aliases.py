"""Model aliases (`models.NAME.aliases`): config checks, the registry's resolution, and every path that takes a
model name resolving an alias to its model (the service, the allow-lists, serve's config, the CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmhost.api import Host
from llmhost.cli import cli
from llmhost.config import ConfigError, FakeEngineConfig, HostConfig, load_config
from llmhost.domain.errors import EngineError, ModelNotSupported
from llmhost.domain.types import ChatMessage, ChatParams, ChatRole, InferencingParams
from llmhost.engine.fake import FakeEngine
from llmhost.engine.registry import Registry, create_registry
from llmhost.run.scope import RunScope
from llmhost.run.service import LlmService
from llmhost.shell.config import settings_for

ALIASES = ["gpt-4.1", "gpt-3.5-turbo-instruct", "text-embedding-3-small"]
CONFIG = """
[engine]
kind = "fake"

[models.gemma-3-270m]
aliases = ["gpt-4.1", "gpt-3.5-turbo-instruct", "text-embedding-3-small"]
"""
GREEDY = InferencingParams(max_tokens=100, temperature=0.0)


def config_file(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "llmhost.toml"
    path.write_text(f'cache-dir = "{tmp_path / "cache"}"\n{text}')
    return path


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    registry = create_registry(load_config(config_file(tmp_path)))
    yield registry
    registry.close()


# -- config ---------------------------------------------------------------------------------------------------


def test_aliases_are_read_from_the_config_file(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path))
    assert config.models["gemma-3-270m"].aliases == tuple(ALIASES)
    assert config.models["smollm2-135m"].aliases == ()  # the default: none


@pytest.mark.parametrize(
    ("models", "places"),
    [
        # An alias that is also a model's name (here a built-in one, kept available by every config file).
        ('[models.gemma-3-270m]\naliases = ["smollm2-135m"]\n', ["models.gemma-3-270m.aliases", "models.smollm2-135m"]),
        # The same alias in two models.
        (
            '[models.a]\npath = "a.gguf"\naliases = ["gpt-4.1"]\n[models.b]\npath = "b.gguf"\naliases = ["gpt-4.1"]\n',
            ["models.a.aliases", "models.b.aliases"],
        ),
    ],
)
def test_a_conflicting_alias_is_a_config_error_naming_both_places(
    tmp_path: Path, models: str, places: list[str]
) -> None:
    path = config_file(tmp_path, f'[engine]\nkind = "fake"\n{models}')
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message and all(f"`{place}`" in message for place in places), message


def test_an_alias_listed_twice_in_one_model_or_empty_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"twice in `models\.gemma-3-270m\.aliases`"):
        load_config(config_file(tmp_path, '[models.gemma-3-270m]\naliases = ["x", "x"]\n'))
    with pytest.raises(ConfigError, match=r"`models\.gemma-3-270m\.aliases\.1`"):
        load_config(config_file(tmp_path, '[models.gemma-3-270m]\naliases = ["x", ""]\n'))


# -- the registry ---------------------------------------------------------------------------------------------


def test_the_registry_resolves_aliases_and_leaves_other_names_unchanged(registry: Registry) -> None:
    assert [registry.canonical(alias) for alias in ALIASES] == ["gemma-3-270m"] * 3
    assert registry.canonical("gemma-3-270m") == "gemma-3-270m"
    assert registry.canonical("no-such-model") == "no-such-model"
    assert Registry.of(FakeEngine()).canonical("gpt-4.1") == "gpt-4.1"  # an engine passed in: no aliases


# -- the service: every call that takes a model ---------------------------------------------------------------


def test_every_service_call_resolves_an_alias_to_its_model(registry: Registry) -> None:
    service = LlmService(lambda: registry)
    assert service.model_info("gpt-4.1").name == "gemma-3-270m"
    assert service.infer("gpt-4.1", "x", GREEDY).text == "Hello from the fake engine."
    assert service.infer("gpt-4.1", "x", GREEDY, RunScope("test")).text == "Hello from the fake engine."
    generation = service.infer_stream("gpt-3.5-turbo-instruct", "x", GREEDY)
    generation.close()
    assert service.tokenize("gpt-4.1", "ab") == service.tokenize("gemma-3-270m", "ab")
    assert service.default_params("gpt-4.1") == service.default_params("gemma-3-270m")
    assert service.embeddings("text-embedding-3-small", ["hi"]).embeddings == (
        service.embeddings("gemma-3-270m", ["hi"]).embeddings
    )
    messages = [ChatMessage(role=ChatRole.USER, content="hi")]
    assert service.apply_chat_template("gpt-4.1", messages, (), True) == (
        service.apply_chat_template("gemma-3-270m", messages, (), True)
    )
    assert service.chat("gpt-4.1", messages, ChatParams()).message.content == "Hello from the fake engine."
    # The fake engine refuses sequences, after checking the model: an unresolved alias would be model-not-supported.
    with pytest.raises(EngineError, match="sequences need"):
        service.open_sequence("gpt-4.1")


def test_a_name_that_is_neither_a_model_nor_an_alias_is_still_model_not_supported(registry: Registry) -> None:
    with pytest.raises(ModelNotSupported, match="'gpt-5'"):
        LlmService(lambda: registry).infer("gpt-5", "x", GREEDY)


def test_an_alias_of_an_allowed_model_is_allowed_and_of_another_refused(registry: Registry) -> None:
    key = "`components.chat.allowed-models` in llmhost.toml"
    allowed = LlmService(lambda: registry).restricted_to(frozenset({"gemma-3-270m"}), key)
    assert allowed.infer("gpt-4.1", "x", GREEDY, RunScope("test")).text == "Hello from the fake engine."
    refused = LlmService(lambda: registry).restricted_to(frozenset({"smollm2-135m"}), key)
    with pytest.raises(ModelNotSupported, match=r"'gpt-4\.1' \(an alias of 'gemma-3-270m'\) is not allowed"):
        refused.model_info("gpt-4.1")


# -- the Python API -------------------------------------------------------------------------------------------


def test_the_python_api_resolves_aliases_in_calls_allow_lists_and_the_model_list(tmp_path: Path) -> None:
    config = HostConfig(
        engine=FakeEngineConfig(),
        models={"gemma-3-270m": {"aliases": ALIASES}, "smollm2-135m": {}},
        cache_dir=tmp_path,
    )
    with Host(config) as host:
        assert host.infer("gpt-4.1", "x", GREEDY).text == "Hello from the fake engine."
        assert host.model_info("text-embedding-3-small").name == "gemma-3-270m"
        assert host._allowed(["gpt-4.1", "smollm2-135m"]) == frozenset({"gemma-3-270m", "smollm2-135m"})
        assert host._allowed(None) is None
        assert {m.name: m.aliases for m in host.models()} == {"gemma-3-270m": tuple(ALIASES), "smollm2-135m": ()}


# -- serve's config -------------------------------------------------------------------------------------------

APP = """
[engine]
kind = "fake"
[models.gemma-3-270m]
aliases = ["gpt-4.1"]
[components.chat]
source = "app.wasm"
allowed-models = ["gpt-4.1", "smollm2-135m"]
[routes]
"/" = "chat"
"""


def test_serve_accepts_an_alias_in_allowed_models_and_grants_its_model(tmp_path: Path) -> None:
    (tmp_path / "app.wasm").write_bytes(b"\0asm")
    settings = settings_for(config_file(tmp_path, APP), None, None, None)
    assert settings.components["chat"].allowed_models == frozenset({"gemma-3-270m", "smollm2-135m"})
    assert settings.host.models["gemma-3-270m"].aliases == ("gpt-4.1",)


def test_serve_config_errors_for_aliases_name_the_file_and_both_keys(tmp_path: Path) -> None:
    (tmp_path / "app.wasm").write_bytes(b"\0asm")
    path = config_file(tmp_path, APP.replace('allowed-models = ["gpt-4.1"', 'allowed-models = ["gpt-5"'))
    with pytest.raises(ConfigError, match=r"`components\.chat\.allowed-models`: model 'gpt-5' is not configured"):
        settings_for(path, None, None, None)
    path = config_file(tmp_path, APP.replace('aliases = ["gpt-4.1"]', 'aliases = ["smollm2-135m"]'))
    with pytest.raises(ConfigError) as error:
        settings_for(path, None, None, None)
    assert str(path) in str(error.value)
    assert "`models.gemma-3-270m.aliases`" in str(error.value) and "`models.smollm2-135m`" in str(error.value)


# -- the CLI --------------------------------------------------------------------------------------------------

UNSET_USER_SETTINGS: dict[str, str | None] = {"LLMHOST_CONFIG": None, "LLMHOST_CACHE_DIR": None}


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=UNSET_USER_SETTINGS, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_llmhost_models_lists_each_models_aliases(tmp_path: Path) -> None:
    code, out, err = invoke("-c", str(config_file(tmp_path)), "models")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split()[-2:] == ["ALIASES", "SOURCE"]
    assert [row.split()[:3] + row.split()[-2:] for row in rows] == [
        ["gemma-3-270m", "base", "4096", ",".join(ALIASES), "(built-in)"],
        ["smollm2-135m", "instruct", "4096", "-", "(built-in)"],
        ["all-minilm-l6-v2", "embedding", "512", "-", "(built-in)"],  # its trained window
    ]


def test_llmhost_infer_takes_an_alias_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    path = str(config_file(tmp_path))
    code, out, err = invoke("-c", path, "infer", "gpt-4.1", "hi")
    assert code == 0, err
    assert out == "Hello from the fake engine.\n"
    code, _, err = invoke("-c", path, "infer", "gpt-5", "hi")
    assert code == 2 and "model-not-supported" in err and "'gpt-5'" in err
