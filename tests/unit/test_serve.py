"""`llmhost serve` without a server: app config validation, the fair admission queue, request scopes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llmhost.config import ConfigError
from llmhost.engine.fake import FakeEngine
from llmhost.serve.config import load_app_config, resolve, settings_for
from llmhost.serve.scope import FairQueue, RequestScope, ScopedEngine
from llmhost.types import EngineError, InferencingParams, InvalidInput, StreamChunk, StreamDone


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


def test_fair_queue_admits_in_arrival_order() -> None:
    queue = FairQueue(1)
    queue.acquire(None)
    order: list[int] = []
    threads = []
    for i in range(5):
        thread = threading.Thread(target=lambda i=i: (queue.acquire(None), order.append(i), queue.release()))
        thread.start()
        threads.append(thread)
        while queue.waiting < i + 1:  # each is in line before the next arrives
            time.sleep(0.001)
    queue.release()
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3, 4]


@pytest.fixture
def scope(tmp_path: Path) -> RequestScope:
    path = app_file(tmp_path, VALID.replace("[components.chat.limits]", "[components.chat.limits]\nmax-tokens = 10"))
    return RequestScope(resolve(load_app_config(path), str(path)).components["chat"])


GREEDY = InferencingParams(max_tokens=100, temperature=0.0)


def test_scoped_engine_enforces_models_and_the_token_budget(scope: RequestScope) -> None:
    engine = ScopedEngine(FakeEngine(models=("gemma-3-270m", "other")), {"gemma-3-270m": 2})
    with scope.active():
        with pytest.raises(InvalidInput, match="`components.chat.allowed-models`"):
            engine.infer("other", "x", GREEDY)
        first = engine.infer("gemma-3-270m", "x", InferencingParams(max_tokens=6))
        second = engine.infer("gemma-3-270m", "x", GREEDY)  # clamped to what is left of 10
        assert (first.usage.generated_token_count, second.usage.generated_token_count) == (6, 4)
        assert second.finish_reason == "length"
        with pytest.raises(InvalidInput, match="limit of 10 tokens"):
            engine.infer("gemma-3-270m", "x", GREEDY)
    assert scope.tokens == 10
    assert engine.infer("other", "x", InferencingParams(max_tokens=2)).text == "He"  # no scope: no limits


def test_cancelling_a_scope_stops_its_generations_and_frees_their_places(scope: RequestScope) -> None:
    engine = ScopedEngine(FakeEngine(), {"gemma-3-270m": 1})
    with scope.active():
        generation = engine.stream("gemma-3-270m", "x", GREEDY)
        assert isinstance(next(generation), StreamChunk)
    queue = engine.admission("gemma-3-270m")
    assert queue is not None
    waiting: list[BaseException] = []
    other = RequestScope(scope.component)

    def wait_for_a_place() -> None:
        with other.active():
            try:
                next(engine.stream("gemma-3-270m", "x", GREEDY))
            except EngineError as error:
                waiting.append(error)

    thread = threading.Thread(target=wait_for_a_place)
    thread.start()
    while queue.waiting == 0:
        time.sleep(0.001)
    other.cancel("the client disconnected")  # a waiter gives up its place in line
    thread.join(5)
    assert [str(e) for e in waiting] == ["the client disconnected"]
    scope.cancel("the deadline passed")
    with pytest.raises(EngineError, match="deadline"):
        next(generation)
    with scope.active(), pytest.raises(EngineError, match="deadline"):
        engine.stream("gemma-3-270m", "x", GREEDY)
    # The cancelled generation's place is free again.
    fresh = RequestScope(scope.component)
    with fresh.active():
        events = list(engine.stream("gemma-3-270m", "x", InferencingParams(max_tokens=2)))
    assert isinstance(events[-1], StreamDone)
