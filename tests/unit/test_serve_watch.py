"""`--watch`'s pure parts (which paths are sources, when changes have settled, what a reload does when a build fails
or changes nothing) and the config keys of serve's two forms (`[sandbox]` for `serve DIR`, `[components]` otherwise),
without a server."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from llmhost.config import ConfigError
from llmhost.serve.component import Users
from llmhost.shell.config import settings_for
from llmhost.shell.watch import Debouncer, SourceFilter, Watcher

# -- which paths are sources ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "source"),
    [
        ("app.py", True),
        ("lib/helper.py", True),
        ("app.js", True),
        ("package.json", True),
        ("wit/world.wit", True),
        ("app.wasm", False),  # build outputs
        ("out/app.cwasm", False),
        ("__pycache__/app.cpython-311.pyc", False),
        ("node_modules/mustache/mustache.js", False),
        (".bindings/wit_world/__init__.py", False),
        (".git/index", False),
        ("app.py~", False),  # editor temp files: Emacs, Vim, Vim's directory probe
        (".#app.py", False),
        (".app.py.swp", False),
        (".app.py.swx", False),
        ("4913", False),
        ("kv/default.db-wal", False),  # a SQLite store beside the app
    ],
)
def test_sources_and_what_is_ignored(tmp_path: Path, relative: str, source: bool) -> None:
    assert SourceFilter({"app": tmp_path}).is_source(tmp_path / relative) is source


def test_changes_map_to_the_components_whose_sources_they_are(tmp_path: Path) -> None:
    chat, tools, data = tmp_path / "chat", tmp_path / "chat" / "tools", tmp_path / "chat" / "data"
    found = SourceFilter({"chat": chat, "tools": tools, "other": tmp_path / "other"}, ignore=[data]).owners(
        [chat / "app.py", tools / "app.js", chat / "app.py~", data / "notes.txt", tmp_path / "elsewhere.py"]
    )
    # A nested guest's change is the outer one's too (its directory is in the outer one's sources).
    assert found == {"chat": [chat / "app.py", tools / "app.js"], "tools": [tools / "app.js"]}


def test_a_burst_of_changes_is_released_once_when_it_settles() -> None:
    debouncer = Debouncer(quiet_s=0.3, max_wait_s=2.0)
    debouncer.add("chat", now=10.0, saved=1000.0)
    debouncer.add("chat", now=10.1, saved=999.5)  # an editor's save: several events
    assert debouncer.due(10.3) == {}  # 0.2 s quiet: not yet
    assert debouncer.due(10.4) == {"chat": 999.5}  # timed from the earliest save
    assert debouncer.due(11.0) == {} and not debouncer.pending()


def test_a_busy_directory_is_rebuilt_after_the_longest_wait() -> None:
    debouncer = Debouncer(quiet_s=0.3, max_wait_s=2.0)
    for step in range(25):  # a change every 0.1 s (a long copy): never quiet
        debouncer.add("chat", now=10.0 + step * 0.1, saved=1000.0)
        released = debouncer.due(10.0 + step * 0.1)
        if released:
            break
    assert released == {"chat": 1000.0} and step == 20


# -- the swap: requests in flight keep the old component, which is closed after the last of them ----------------------


class Stub:
    """A component as `ServeApp` uses one (routing, and the counts of `component.Users`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0
        self.users = Users(self.close)
        self.enter, self.leave, self.retire = self.users.enter, self.users.leave, self.users.retire

    def close(self) -> None:
        self.closed += 1


def test_a_swap_routes_new_requests_to_the_new_component_and_closes_the_old_after_its_last(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from llmhost.serve.app import ServeApp

    old, new = Stub("old"), Stub("new")
    app = ServeApp({"chat": old}, {"/": "chat"}, ThreadPoolExecutor(1))  # type: ignore[dict-item]
    first, second = app.route("/a"), app.route("/b")
    assert first is old and second is old
    old.enter()
    old.enter()  # two requests in flight
    app.swap("chat", new)  # type: ignore[arg-type]
    assert app.route("/c") is new and old.closed == 0
    old.leave()
    assert old.closed == 0  # one is still running on it
    old.leave()
    assert old.closed == 1 and new.closed == 0
    idle = Stub("idle")
    app.swap("chat", idle)  # type: ignore[arg-type]
    assert new.closed == 1  # nobody used it: closed at once, and only once
    new.retire()
    assert new.closed == 1


# -- a reload, with its I/O replaced ---------------------------------------------------------------------------------


def watcher(tmp_path: Path, build: object, swapped: list[tuple[str, str]]) -> Watcher[str]:
    current = tmp_path / "current.wasm"
    current.write_bytes(b"old")
    return Watcher(
        {"chat": tmp_path},
        build,  # type: ignore[arg-type]
        lambda name, path: f"loaded {path.read_bytes().decode()}",
        lambda name, loaded: swapped.append((name, loaded)),
        current={"chat": current},
    )


def test_a_reload_swaps_in_the_new_build_and_times_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def build(name: str) -> Path:
        (tmp_path / "new.wasm").write_bytes(b"new")
        return tmp_path / "new.wasm"

    swapped: list[tuple[str, str]] = []
    caplog.set_level(logging.INFO, "llmhost.serve")
    reload = anyio.run(watcher(tmp_path, build, swapped).reload, "chat", 0.0)
    assert swapped == [("chat", "loaded new")]
    assert reload is not None and reload.built_s >= 0 and reload.compiled_s >= 0
    assert any(r.getMessage().startswith("reloaded chat in ") and "(built " in r.getMessage() for r in caplog.records)


def test_a_failed_build_keeps_the_old_component_and_logs_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from llmhost.toolchains.errors import BuildError

    def build(name: str) -> Path:
        raise BuildError(f"{tmp_path}/app.py:3:9: syntax error: expected ':'")

    swapped: list[tuple[str, str]] = []
    assert anyio.run(watcher(tmp_path, build, swapped).reload, "chat", 0.0) is None
    assert swapped == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"chat: the build failed; still serving the previous version: {tmp_path}/app.py:3:9: syntax error: expected ':'"
    ]


def test_a_build_of_the_same_bytes_is_no_reload(tmp_path: Path) -> None:
    swapped: list[tuple[str, str]] = []
    assert anyio.run(watcher(tmp_path, lambda name: tmp_path / "current.wasm", swapped).reload, "chat", 0.0) is None
    assert swapped == []


# -- the config keys of each form ------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "app.wasm").write_bytes(b"\0asm")
    path = tmp_path / "llmhost.toml"
    path.write_text(text)
    return path


COMPONENTS = '[components.chat]\nsource = "app.wasm"\n[routes]\n"/" = "chat"\n'
SANDBOX = '[sandbox]\nkey-value-stores = ["default"]\nallowed-outbound-hosts = ["http://127.0.0.1:8000"]\n'


def test_a_host_config_grants_serve_dir_its_sandbox(tmp_path: Path) -> None:
    path = write(tmp_path, f'compile-strategy = "fast-first"\n{SANDBOX}max-memory-mb = 64\nmax-open-streams = 3\n')
    settings = settings_for(path, tmp_path / "app.wasm", None, None)
    app = settings.components["app"]
    assert app.grants.key == "sandbox" and app.grants.key_value_stores == frozenset({"default"})
    assert [h.pattern for h in app.grants.allowed_hosts] == ["http://127.0.0.1:8000"]
    assert app.limits.max_memory_mb == 64 and app.limit_key("max_memory_mb") == f"`sandbox.max-memory-mb` in {path}"
    assert app.limit_key("deadline_s") == f"`limits.deadline-s` in {path}"
    assert settings.host.compile_strategy == "fast-first" and settings.host.sandbox.max_open_streams == 3


def test_sandbox_with_components_is_refused_naming_the_components_key(tmp_path: Path) -> None:
    path = write(tmp_path, SANDBOX + COMPONENTS)
    with pytest.raises(ConfigError, match=r"`sandbox`: .*`components\.chat\.key-value-stores`"):
        settings_for(path, None, None, None)


def test_components_with_an_app_argument_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, COMPONENTS)
    with pytest.raises(ConfigError, match=r"not both .*`\[sandbox\]`"):
        settings_for(path, tmp_path / "app.wasm", None, None)


def test_sandbox_without_an_app_argument_says_to_give_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"`sandbox` grants the one component of `llmhost serve DIR`"):
        settings_for(write(tmp_path, SANDBOX), None, None, None)


def test_a_sandbox_grant_that_cannot_be_honoured_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "[sandbox]\ninherit-network = true\n")
    with pytest.raises(ConfigError, match=r"`sandbox\.inherit-network` cannot be granted"):
        settings_for(path, tmp_path / "app.wasm", None, None)


def test_a_directory_source_of_another_world_names_the_key_and_the_command(tmp_path: Path) -> None:
    guest = tmp_path / "bot"
    guest.mkdir()
    (guest / "app.py").write_text(
        "from wit_world import WitWorld\n\n\nclass WitWorld(WitWorld):\n    def run(self, args):\n        return 0\n"
    )
    path = write(tmp_path, COMPONENTS.replace('"app.wasm"', '"bot"'))
    with pytest.raises(
        ConfigError, match=r"`components\.chat\.source`: .*bot is a guest of the `command` world; use `llmhost run`"
    ):
        settings_for(path, None, None, tmp_path / "cache")
