"""Guest sources written against an earlier `llmhost:llm` keep building (issue 50, item 8): `llmhost build` builds a
JavaScript source against the WIT of the version it imports, and a tool guest's own world against the version it
names, whether it imports an interface (`llmhost:llm/llm@0.2.2`) or includes a world (`platform@0.2.3`).

One JavaScript source per shipped version (generated from the template below) calls `infer` with that version's
params record, `tokenize`, and the function its version added; each is built with the `llmhost build` command and
run on the real model, its text compared with the Python API's on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from wasmtime import component

from js_version_sources import ADDED, MAX_TOKENS, write_sources
from llmhost import Host, InferencingParams
from llmhost.runtime.components import create_wasmtime_engine
from llmhost.toolchains.python import shipped_versions, wit_dir
from serve_driver import LLMHOST

from .conftest import MODEL

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
PROMPT = "The capital of France is"


def cli(*args: str, cwd: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([LLMHOST, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def imports(wasm: Path) -> list[str]:
    # Compiled with Winch only to read its type: 1 s for a JavaScript component, against 5 s with Cranelift.
    engine = create_wasmtime_engine("winch")
    return list(component.Component.from_file(engine, str(wasm)).type.imports(engine))


def test_every_shipped_version_is_a_version_here() -> None:
    # The test below covers every version llmhost ships: a new one needs an entry in ADDED.
    assert sorted(shipped_versions(wit_dir())) == sorted(ADDED)


@pytest.fixture(scope="module")
def version_guests(tmp_path_factory: pytest.TempPathFactory, llmhost_cache_dir: Path) -> dict[str, Path]:
    """Each version's source, built by `llmhost build` (two at a time: two cores)."""
    root = tmp_path_factory.mktemp("js-versions")
    write_sources(root)

    def build(version: str) -> Path:
        done = cli("build", f"guest-{version}", "-o", f"{version}.wasm", cwd=root, cache_dir=llmhost_cache_dir)
        assert done.returncode == 0, f"{version}: {done.stderr}"
        return root / f"{version}.wasm"

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(ADDED, pool.map(build, ADDED), strict=True))


@pytest.mark.parametrize("version", list(ADDED))
def test_a_js_source_on_each_version_builds_and_runs(
    version: str, version_guests: dict[str, Path], real_host: Host
) -> None:
    wasm = version_guests[version]
    names = imports(wasm)
    # Built against the version it names: its imports are that version's (and from 0.2.3 on, the platform's).
    assert f"llmhost:llm/llm@{version}" in names
    assert not [n for n in names if n.startswith("llmhost:llm/") and not n.endswith(f"@{version}")], names
    assert ("wasi:keyvalue/store@0.2.0-draft2" in names) == (tuple(map(int, version.split("."))) >= (0, 2, 3))
    done = real_host.load(wasm).run_captured([MODEL, PROMPT])
    assert done.exit_code == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    greedy = InferencingParams(max_tokens=MAX_TOKENS, temperature=0.0, repeat_penalty=1.0)
    assert got["text"] == real_host.infer(MODEL, PROMPT, greedy).text
    assert got["tokens"] == len(real_host.tokenize(MODEL, PROMPT))
    expected_extra: Any = {
        "0.1.0": None,
        "0.2.0": [m.name for m in real_host.models()],
        "0.2.1": InferencingParams().max_tokens,
        "0.2.2": [True] + [False] * (got["tokens"] - 1),  # no log-probability for the first token only
        "0.2.3": {"tag": "denied"},
        "0.2.4": {"tag": "denied"},
        "0.2.5": [["loaded", True]],
    }[version]
    assert got["extra"] == expected_extra


PLATFORM_WORLD = """\
package test:platform-tool@0.1.0;

/// A tool guest whose world includes everything llmhost offers (llmhost:llm/platform@0.2.3).
world tools {
    include llmhost:llm/platform@0.2.3;

    /// The config value `name`, and what opening key-value store `store` and fetching `url` give.
    export probe: func(name: string, store: string, url: string) -> string;
}
"""
PLATFORM_APP = """\
import json

from componentize_py_types import Err
from wit_world import WitWorld as _World
from wit_world.imports import outbound_http, wasi_config_store, wasi_keyvalue_store


def _error(call):
    try:
        call()
    except Err as error:
        return type(error.value).__name__
    return "ok"


class WitWorld(_World):
    def probe(self, name: str, store: str, url: str) -> str:
        request = outbound_http.Request(method="GET", url=url, headers=[], body=None, timeout_ms=None)
        return json.dumps({
            "config": wasi_config_store.get(name),
            "store": _error(lambda: wasi_keyvalue_store.open(store)),
            "http": _error(lambda: outbound_http.send(request)),
        })
"""


def test_tool_guests_build_against_the_version_their_world_names(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    """tests/guests/mcp_probe imports llmhost:llm/llm@0.2.2; a tool guest including platform@0.2.3 gets every
    platform import, served by `llmhost mcp` with its component's grants (a config value; nothing else)."""
    done = cli(
        "build",
        str(REPO / "tests" / "guests" / "mcp_probe"),
        "-o",
        "tools.wasm",
        cwd=tmp_path,
        cache_dir=llmhost_cache_dir,
    )
    assert done.returncode == 0, done.stderr
    names = imports(tmp_path / "tools.wasm")
    assert "llmhost:llm/llm@0.2.2" in names and not any(n.startswith("wasi:keyvalue") for n in names)

    guest = tmp_path / "platform"
    (guest / "wit").mkdir(parents=True)
    (guest / "wit" / "world.wit").write_text(PLATFORM_WORLD)
    (guest / "app.py").write_text(PLATFORM_APP)
    done = cli("build", "platform", "-o", "platform.wasm", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert done.returncode == 0, done.stderr
    names = imports(tmp_path / "platform.wasm")
    for name in (
        "llmhost:llm/outbound-http@0.2.3",
        "wasi:keyvalue/atomics@0.2.0-draft2",
        "wasi:config/store@0.2.0-draft",
    ):
        assert name in names
    config = tmp_path / "tools.toml"
    config.write_text('[components.platform]\nsource = "platform.wasm"\nconfig = { GREETING = "hi" }\n')
    answer = anyio.run(_call_probe, config, llmhost_cache_dir)
    assert json.loads(answer) == {"config": "hi", "store": "Error_AccessDenied", "http": "Error_Denied"}


async def _call_probe(config: Path, cache_dir: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    server = StdioServerParameters(command=LLMHOST, args=["mcp", "-c", str(config)], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        arguments = {"name": "GREETING", "store": "default", "url": "http://127.0.0.1:9/"}
        result = await session.call_tool("probe", arguments)
        assert not result.is_error, result
        return "".join(block.text for block in result.content)  # type: ignore[union-attr]
