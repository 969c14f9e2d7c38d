"""A JavaScript guest reaches outbound HTTP, key-value state and config values through the raw bindings
(`llmhost:llm/outbound-http@0.2.3`, `wasi:keyvalue/{store,atomics}@0.2.0-draft2`, `wasi:config/store@0.2.0-draft`)
and gets what a Python guest gets through the SDK (`http`, `kv`, `config`): tests/guests/js_platform/app.js and its
twin tests/guests/platform_probe/app.py run the same commands on one host, against a real server on loopback and a
real SQLite store, and print the same JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, build_component
from llmhost.config import EnvValue, HostConfig, KeyValueStoreConfig, SandboxConfig
from outbound_servers import TestServer, serving

pytestmark = [pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
GUESTS = {"js": REPO / "tests" / "guests" / "js_platform", "py": REPO / "tests" / "guests" / "platform_probe"}
TOKEN_VARIABLE = "LLMHOST_TEST_JS_PLATFORM_TOKEN"


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def apps(
    server: TestServer,
    llmhost_cache_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch_module: pytest.MonkeyPatch,
) -> Iterator[dict[str, App]]:
    out = tmp_path_factory.mktemp("platform-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        built = dict(
            zip(
                GUESTS,
                pool.map(lambda n: build_component(GUESTS[n], out / f"{n}.wasm", cache_dir=llmhost_cache_dir), GUESTS),
                strict=True,
            )
        )
    monkeypatch_module.setenv(TOKEN_VARIABLE, "s3cret")
    config = HostConfig(
        cache_dir=llmhost_cache_dir,
        data_dir=out / "data",
        key_value={"declared": KeyValueStoreConfig(path=out / "declared.db")},
        sandbox=SandboxConfig(
            key_value_stores=("default", "undeclared"),
            config={"GREETING": "hi", "TOKEN": EnvValue(env=TOKEN_VARIABLE)},
            allowed_outbound_hosts=(server.url("").rstrip("/"),),
        ),
    )
    with Host(config) as host:
        yield {name: host.load(wasm) for name, wasm in built.items()}


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def both(apps: dict[str, App], *args: str) -> list[Any]:
    """Run the command in the JavaScript guest, then in the Python one: their two JSON values."""
    values = []
    for app in (apps["js"], apps["py"]):
        done = app.run_captured(list(args))
        assert done.exit_code == 0, done.stderr
        values.append(json.loads(done.stdout))
    return values


def test_config_values(apps: dict[str, App]) -> None:
    js, py = both(apps, "config", "GREETING")
    assert js == py == {"value": "hi", "all": {"GREETING": "hi", "TOKEN": "s3cret"}}
    js, py = both(apps, "config", "NOPE")
    assert js == py and js["value"] is None


def test_outbound_http_to_a_granted_server(apps: dict[str, App], server: TestServer) -> None:
    before = len(server.hits)
    js, py = both(apps, "fetch", "POST", server.url("/echo?from=guest"), '{"n": 1}')
    assert js == py
    assert js["status"] == 200 and js["type"] == "application/json"
    echoed = json.loads(js["body"])
    assert echoed["method"] == "POST" and echoed["path"] == "/echo?from=guest" and echoed["body"] == '{"n": 1}'
    assert ["accept", "application/json"] in echoed["headers"]
    assert server.hits[before:] == ["POST /echo?from=guest"] * 2
    js, py = both(apps, "fetch", "GET", server.url("/status/404"), "")
    assert js == py == {"status": 404, "type": "text/plain", "body": "status 404"}  # a status, not an error


def test_outbound_http_refusals(apps: dict[str, App], server: TestServer) -> None:
    before = len(server.hits)
    # The same server by another name than the grant's, and a port nobody granted: `denied`, nothing sent.
    for url in (server.url("/hello", host="localhost"), "http://127.0.0.1:9/"):
        assert both(apps, "fetch", "GET", url, "") == [{"error": "denied"}] * 2
    assert both(apps, "fetch", "GET", "not a url", "") == [{"error": "invalid-request"}] * 2
    assert both(apps, "fetch", "BAD METHOD", server.url("/hello"), "") == [{"error": "invalid-request"}] * 2
    assert server.hits[before:] == []


def test_key_value_state_is_shared_by_js_and_python_guests(apps: dict[str, App]) -> None:
    js, py = both(apps, "kv", "default", "visits", "3")
    # One store: the Python guest's increments continue the JavaScript guest's count.
    assert js["counts"] == [1, 2, 3] and py["counts"] == [4, 5, 6]
    for value in (js, py):
        assert value["get"] == "héllo" and value["missing"] is None and value["exists"] is False
        assert value["keys"] == ["visits", "visits.text"]


def test_key_value_refusals(apps: dict[str, App]) -> None:
    assert both(apps, "kv", "declared", "k", "1") == [{"error": "access-denied"}] * 2  # declared, not granted
    assert both(apps, "kv", "undeclared", "k", "1") == [{"error": "no-such-store"}] * 2  # granted, not declared
