"""`llmhost serve` without a server: app config validation, and request scopes (models, token budget, cancellation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.config import ConfigError
from llmhost.domain.errors import EngineError, InvalidInput, ModelNotSupported
from llmhost.domain.types import InferencingParams, StreamChunk, StreamDone
from llmhost.engine.fake import FakeEngine
from llmhost.engine.registry import Registry
from llmhost.run.scope import RunScope, TokenBudget
from llmhost.run.service import LlmService
from llmhost.shell.config import load_app_config, resolve, settings_for


def app_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "app.wasm").write_bytes(b"\0asm")
    path = tmp_path / "llmhost.toml"
    path.write_text(text)
    return path


VALID = """
listen = "127.0.0.1:9000"
[engine]
kind = "fake"
[components.chat]
source = "app.wasm"
allowed-models = ["gemma-3-270m"]
[components.chat.limits]
deadline-s = 5
[routes]
"/" = "chat"
"""


def test_a_valid_config_resolves_paths_limits_and_the_keys_they_came_from(tmp_path: Path) -> None:
    path = app_file(tmp_path, VALID)
    settings = resolve(load_app_config(path), str(path))
    chat = settings.components["chat"]
    assert settings.listen == ("127.0.0.1", 9000)
    assert chat.source == tmp_path / "app.wasm"
    assert chat.limits.deadline_s == 5 and chat.sandbox.timeout_s == 5
    assert chat.limit_key("deadline_s") == f"`components.chat.limits.deadline-s` in {path}"
    assert chat.limit_key("max_tokens") == f"`limits.max-tokens` in {path}"
    assert chat.allowed_models == frozenset({"gemma-3-270m"})


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (("deadline-s = 5", "deadline-s = -1"), "components.chat.limits.deadline-s"),
        (("deadline-s = 5", "deadline = 5"), "components.chat.limits.deadline"),
        (('"/" = "chat"', '"/" = "missing"'), "routes./"),
        (('"/" = "chat"', '"api" = "chat"'), "routes.api"),
        (('source = "app.wasm"', 'source = "nope.wasm"'), "components.chat.source"),
        (('allowed-models = ["gemma-3-270m"]', 'allowed-models = ["gpt-9"]'), "components.chat.allowed-models"),
        (('listen = "127.0.0.1:9000"', 'listen = "nowhere"'), "listen"),
        (("[engine]", "max-concurrency = 0\n[engine]"), "max-concurrency"),
    ],
)
def test_every_config_error_names_the_file_and_the_key(tmp_path: Path, change: tuple[str, str], key: str) -> None:
    path = app_file(tmp_path, VALID.replace(*change))
    with pytest.raises(ConfigError) as error:
        settings_for(path, None, None, None)
    assert str(path) in str(error.value) and f"`{key}`" in str(error.value)


def test_one_component_form(tmp_path: Path) -> None:
    app = tmp_path / "hello-app.wasm"
    app.write_bytes(b"\0asm")
    settings = settings_for(None, app, "127.0.0.1:0", tmp_path)
    assert settings.routes == {"/": "hello-app"} and settings.listen == ("127.0.0.1", 0)
    assert settings.host.cache_dir == tmp_path
    with pytest.raises(ConfigError, match="not both"):
        settings_for(app_file(tmp_path, VALID), app, None, None)
    with pytest.raises(ConfigError, match="--listen"):
        settings_for(None, app, "8080", None)


@pytest.fixture
def service() -> LlmService:
    key = "`components.chat.allowed-models` in llmhost.toml"
    return LlmService(lambda: REGISTRY).restricted_to(frozenset({"gemma-3-270m"}), key)


ENGINE = FakeEngine(models=("gemma-3-270m", "other"))
REGISTRY = Registry.of(ENGINE)
GREEDY = InferencingParams(max_tokens=100, temperature=0.0)


def budget_scope(limit: int = 10) -> RunScope:
    return RunScope("request to chat", TokenBudget(limit, "`limits.max-tokens` in llmhost.toml"))


def test_a_request_scope_enforces_models_and_the_token_budget(service: LlmService) -> None:
    scope = budget_scope()
    with pytest.raises(ModelNotSupported, match="`components.chat.allowed-models`"):
        service.infer("other", "x", GREEDY, scope)
    first = service.infer("gemma-3-270m", "x", InferencingParams(max_tokens=6), scope)
    second = service.infer("gemma-3-270m", "x", GREEDY, scope)  # clamped to what is left of 10
    assert (first.usage.generated_token_count, second.usage.generated_token_count) == (6, 4)
    assert second.finish_reason == "length"
    with pytest.raises(InvalidInput, match="limit of 10 tokens"):
        service.infer("gemma-3-270m", "x", GREEDY, scope)
    assert scope.tokens == 10
    assert LlmService(lambda: REGISTRY).infer("other", "x", InferencingParams(max_tokens=2)).text == "He"  # no scope


def test_cancelling_a_scope_stops_its_generations_and_later_calls(service: LlmService) -> None:
    scope = budget_scope(1000)
    generation = service.infer_stream("gemma-3-270m", "x", GREEDY, scope)
    assert isinstance(next(generation), StreamChunk)
    scope.cancel("the deadline passed")
    with pytest.raises(EngineError, match="deadline"):
        next(generation)
    with pytest.raises(EngineError, match="deadline"):
        service.infer_stream("gemma-3-270m", "x", GREEDY, scope)
    # Another request is unaffected.
    events = list(service.infer_stream("gemma-3-270m", "x", InferencingParams(max_tokens=2), budget_scope()))
    assert isinstance(events[-1], StreamDone)
