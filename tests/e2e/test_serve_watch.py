"""`serve -c llmhost.toml --watch` with `source = "."` (a Python and a JavaScript guest), `-c host.toml serve DIR`
with `[sandbox]` grants, and `mcp DIR --watch` telling its client that the tools changed: real builds, the real
engine, real server processes.

The guests (tests/guests/watch_py, watch_js) answer their VERSION and a key-value counter; each test edits a copy.
The edits are the same every run, so with $LLMHOST_TEST_CACHE_DIR their builds and compiles come from the cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from outbound_servers import serving as outbound_serving
from serve_driver import LLMHOST, Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
RELOAD_TIMEOUT_S = 240.0  # a cold cache builds (~20-35 s) and compiles with Cranelift (~25 s) on 2 cores
LOADED_MODEL = r"loaded model \S+ in"
RELOADED = r"reloaded app in ([\d.]+) s \(built [\d.]+ s, compiled [\d.]+ s\)"


def guest_copy(tmp_path: Path, guest: str) -> Path:
    app = tmp_path / "app"
    shutil.copytree(REPO / "tests" / "guests" / guest, app, ignore=shutil.ignore_patterns("__pycache__"))
    return app


def get(server: Server, path: str) -> tuple[int, dict[str, Any]]:
    status, body = server.request("GET", path)
    return status, json.loads(body)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


WATCHED = {"watch_py": ("app.py", 'VERSION = "v1"'), "watch_js": ("app.js", 'const VERSION = "v1";')}
# A syntax error on the line below the version, and how far below the version is the line the log names: Python's
# parser names that line, the JavaScript one the next statement's (after a blank line), where the call is unclosed.
BROKEN = {"watch_py": ("def broken(:\n    pass\n", 1), "watch_js": ("function broken( {\n", 3)}


@pytest.mark.parametrize("guest", list(WATCHED))
def test_watch_swaps_an_edit_in_keeps_models_and_state_and_survives_a_broken_edit(
    tmp_path: Path, llmhost_cache_dir: Path, guest: str
) -> None:
    app = guest_copy(tmp_path, guest)
    # The data directory is outside the watched one; the app's own `llmhost.toml` is in it (as `llmhost new` has it).
    (app / "llmhost.toml").write_text(
        'data-dir = "../data"\n[components.app]\nsource = "."\nkey-value-stores = ["default"]\n[routes]\n"/" = "app"\n'
    )
    entry, version_line = WATCHED[guest]
    with serving(["-c", str(app / "llmhost.toml"), "--watch"], llmhost_cache_dir) as server:
        server.wait_for_line(r"watching .* for changes", 30)
        assert get(server, "/count") == (200, {"version": "v1", "count": 1})
        if guest == "watch_py":  # one small generation: the model is loaded once, and stays
            assert get(server, "/infer")[1]["tokens"] > 0
        pid = server.process.pid

        mark = len(server.lines)
        edit(app / entry, version_line, version_line.replace("v1", "v2"))
        reloaded = server.wait_for_line(RELOADED, RELOAD_TIMEOUT_S, mark)
        assert float(reloaded.group(1)) > 0
        assert get(server, "/count") == (200, {"version": "v2", "count": 2})  # a new version, the same state
        if guest == "watch_py":
            status, answer = get(server, "/infer")
            assert status == 200 and answer["version"] == "v2" and answer["tokens"] > 0
            assert len([line for line in server.lines if re.search(LOADED_MODEL, line)]) == 1

        mark = len(server.lines)
        broken, below = BROKEN[guest]
        line_no = (app / entry).read_text().splitlines().index(version_line.replace("v1", "v2")) + 1 + below
        edit(app / entry, version_line.replace("v1", "v2"), version_line.replace("v1", "v3") + "\n" + broken)
        failed = server.wait_for_line(r"app: the build failed; still serving the previous version: (.*)", 60, mark)
        assert re.search(rf"{re.escape(entry)}:{line_no}\b", failed.group(1)), failed.group(1)
        assert get(server, "/count") == (200, {"version": "v2", "count": 3})
        assert server.process.pid == pid and server.process.poll() is None
        assert len([line for line in server.lines if "Started server process" in line]) == 1
        assert not any("Traceback" in line for line in server.lines)


def test_a_host_config_serves_dir_with_its_sandbox_grants(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    app = guest_copy(tmp_path, "watch_py")
    with outbound_serving() as outbound:
        host_toml = tmp_path / "host.toml"
        host_toml.write_text(
            f'data-dir = "{tmp_path / "data"}"\n[sandbox]\nkey-value-stores = ["default"]\n'
            f'allowed-outbound-hosts = ["{outbound.url("").rstrip("/")}"]\n'
        )
        # The host config of `llmhost -c host.toml run DIR`, given to serve (`llmhost -c` and `serve -c` are one).
        with serving(["-c", str(host_toml), str(app)], llmhost_cache_dir) as server:
            assert get(server, "/count") == (200, {"version": "v1", "count": 1})
            assert get(server, "/count") == (200, {"version": "v1", "count": 2})
            status, fetched = get(server, "/fetch?url=" + outbound.url("/hello"))
            assert (status, fetched["status"], fetched["text"]) == (200, 200, "hello")
            # Not granted: refused, and the log names the key of this mode that grants it.
            assert get(server, "/count?store=other") == (500, {"version": "v1", "error": "access-denied"})
            server.wait_for_line(r"key-value store 'other' is not granted .*`sandbox\.key-value-stores`", 10)
            assert get(server, "/fetch?url=http://127.0.0.2:9/") == (500, {"version": "v1", "error": "denied"})
            assert not any("components.app" in line for line in server.lines)


def test_mcp_watch_tells_its_client_when_the_tools_change(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    app = guest_copy(tmp_path, "watch_tools")
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(llmhost_cache_dir)
    params = StdioServerParameters(command=LLMHOST, args=["mcp", str(app), "--watch"], env=env)
    log = tmp_path / "server.log"
    seen: dict[str, Any] = {}

    async def conversation() -> None:
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        with log.open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, message_handler=on_message) as session,
            ):
                initialized = await session.initialize()
                seen["capability"] = initialized.capabilities.tools
                seen["before"] = sorted(tool.name for tool in (await session.list_tools()).tools)
                seen["v1"] = (await session.call_tool("version", {})).content[0].text
                edit(app / "app.py", 'VERSION = "v1"', 'VERSION = "v2"\n\n\ndef shout(text):\n    return text.upper()')
                edit(
                    app / "app.py",
                    "        return VERSION\n",
                    "        return VERSION\n\n    def shout(self, text: str) -> str:\n        return shout(text)\n",
                )
                edit(
                    app / "wit" / "world.wit",
                    "    export version: func() -> string;",
                    "    export version: func() -> string;\n    export shout: func(text: string) -> string;",
                )
                with anyio.fail_after(RELOAD_TIMEOUT_S):
                    await changed.wait()
                seen["after"] = sorted(tool.name for tool in (await session.list_tools()).tools)
                seen["v2"] = (await session.call_tool("version", {})).content[0].text
                seen["shout"] = (await session.call_tool("shout", {"text": "hi"})).content[0].text

    anyio.run(conversation)
    assert seen["capability"] is not None and seen["capability"].list_changed, log.read_text()
    assert (seen["before"], seen["v1"]) == (["version"], "v1")
    assert (seen["after"], seen["v2"], seen["shout"]) == (["shout", "version"], "v2", "HI")
    assert re.search(RELOADED, log.read_text())
