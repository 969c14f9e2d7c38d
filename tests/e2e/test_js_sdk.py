"""The JavaScript SDK (host/llmhost/guest_sdk_js/llmhost, `import { llm, kv } from "llmhost"`) against the Python SDK
on the same inputs: tests/guests/sdk_probe_js does what tests/guests/sdk_probe (model calls, errors) and
tests/guests/platform_probe (config, outbound HTTP, key-value) do through llmhost_guest, and prints the same JSON; on
one machine, with the same parameters, the two guests' outputs are equal. Its other calls are compared with the
Python host API (infer, streams as iterators and callbacks, chat, tokenize, embed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, InferencingParams, build_component
from llmhost.config import HostConfig, KeyValueStoreConfig, SandboxConfig
from llmhost.engine.status import model_statuses
from outbound_servers import TestServer, serving

from .conftest import MINILM, SMOL, Probe

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
GUESTS = {"js": REPO / "tests" / "guests" / "sdk_probe_js", "py": REPO / "tests" / "guests" / "platform_probe"}
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def built(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sdk-js")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        wasm = pool.map(lambda n: build_component(GUESTS[n], out / f"{n}.wasm", cache_dir=llmhost_cache_dir), GUESTS)
        return dict(zip(GUESTS, wasm, strict=True))


@pytest.fixture(scope="module")
def js_sdk(real_host: Host, built: dict[str, Path]) -> App:
    return real_host.load(built["js"])


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def platform(
    built: dict[str, Path], server: TestServer, llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, App]]:
    """Both guests on a host that grants the default store, config values and the test server (no model)."""
    out = tmp_path_factory.mktemp("sdk-js-platform")
    config = HostConfig(
        cache_dir=llmhost_cache_dir,
        data_dir=out / "data",
        key_value={"declared": KeyValueStoreConfig(path=out / "declared.db")},
        sandbox=SandboxConfig(
            key_value_stores=("default",),
            config={"GREETING": "hi"},
            allowed_outbound_hosts=(server.url("").rstrip("/"),),
        ),
    )
    with Host(config) as host:
        yield {name: host.load(wasm) for name, wasm in built.items()}


def run(app: App, *args: str) -> Any:
    done = app.run_captured(list(args))
    assert done.exit_code in (0, 1), done.stderr
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def both(apps: dict[str, App], *args: str) -> list[Any]:
    return [run(apps["js"], *args), run(apps["py"], *args)]


def test_errors_are_the_python_sdks_classes_with_a_kind(js_sdk: App, sdk: Probe) -> None:
    js, py = run(js_sdk, "errors", SMOL)["ok"], sdk("errors", SMOL)
    for name, kind in (("unknown-model", "model-not-supported"), ("bad-temperature", "invalid-input")):
        assert js[name].pop("kind") == kind
        assert js[name] == py[name]  # the class, the host's message, what it is an instance of
    assert js["two-constraints"]["type"] == py["two-constraints"]["type"] == "InvalidInput"
    assert js["chat-unknown-model"]["type"] == "ModelNotSupported" and js["chat-unknown-model"]["unsupported"]
    assert js["stream-bad-top-p"]["kind"] == "invalid-input" and "top" in js["stream-bad-top-p"]["message"]
    assert js["bad-role"]["type"] == "InvalidInput" and "robot" in js["bad-role"]["message"]


def test_chat_with_tools_equals_the_python_sdks(js_sdk: App, sdk: Probe) -> None:
    # Seeded sampling of a constrained tool call, then a greedy reply: the same request from both SDKs (partial
    # options filled with the host's defaults) gives the same replies on this machine.
    js, py = run(js_sdk, "chat", SMOL, "required", "1")["ok"], sdk("chat", SMOL, "required", "1")
    for value in (js, py):  # a call's id is the host's random one
        for call in value["replies"][0]["calls"]:
            assert call.pop("id").startswith("call_")
    assert js == py
    [reply] = js["replies"]
    assert reply["finish_reason"] == "tool-calls" and reply["calls"][0]["name"] == "get_weather"
    assert reply["content"] is None and reply["text"] == ""


def test_infer_streams_chat_and_embed_equal_the_host_api(js_sdk: App, real_host: Host) -> None:
    got = run(js_sdk, "basics", SMOL, PROMPT, "6")["ok"]
    params = InferencingParams(max_tokens=6, temperature=0.0)
    want = real_host.infer(SMOL, PROMPT, params)
    usage = {"promptTokens": want.usage.prompt_token_count, "generatedTokens": want.usage.generated_token_count}
    done = {"finishReason": want.finish_reason.value, "usage": usage}
    assert got["infer"] == {"text": want.text, "string": want.text, "finish": want.finish_reason.value, "usage": usage}
    stream = got["stream"]  # the iterator: chunks joined are the text, `done` how it ended
    assert "".join(c["text"] for c in stream["chunks"]) == stream["text"] == want.text and stream["done"] == done
    assert sum(len(c["ids"]) for c in stream["chunks"]) <= want.usage.generated_token_count
    assert "".join(got["callback"]["parts"]) == want.text and got["callback"]["done"] == done
    reply = real_host.chat(SMOL, [{"role": "user", "content": PROMPT}], params)
    chat = got["chat"]
    assert chat["text"] == chat["streamed"] == reply.message.content
    assert chat["usage"] == {
        "promptTokens": reply.usage.prompt_token_count,
        "generatedTokens": reply.usage.generated_token_count,
    }
    assert chat["done"]["usage"] == chat["usage"] and chat["finish"] == reply.finish_reason.value
    assert got["tokens"] == real_host.tokenize(SMOL, PROMPT)
    vectors = real_host.embeddings(MINILM, ["a cat", PROMPT])
    assert got["embed"]["count"] == 2 and got["embed"]["dims"] == len(vectors.embeddings[0]) == 384
    assert got["embed"]["first"] == pytest.approx(vectors.embeddings[0][:4], abs=1e-6)
    assert got["embed"]["usage"]["promptTokens"] == vectors.prompt_token_count
    assert got["kind"] == "instruct" and got["info"]["name"] == SMOL and got["info"]["contextLength"] > 0
    # Right after those calls the model is loaded and idle: the SDK's record is the host's own status, in seconds.
    (host_status,) = [s for s in model_statuses(real_host.engine) if s.name == SMOL]
    status = got["status"]
    assert (status["state"], status["loaded"]) == ("loaded", True) and status["inUse"] == 0
    assert status["memoryBytes"] == host_status.memory_bytes > 0
    assert status["keepAliveS"] == host_status.keep_alive_s
    assert 0 <= status["idleS"] <= host_status.idle_s  # type: ignore[operator]
    assert status["unloadInS"] == pytest.approx(status["keepAliveS"] - status["idleS"], abs=0.002)


def test_config_http_and_kv_equal_the_python_sdks(platform: dict[str, App], server: TestServer) -> None:
    js, py = both(platform, "config", "GREETING")
    assert js == py == {"value": "hi", "all": {"GREETING": "hi"}}
    js, py = both(platform, "config", "NOPE")
    assert js == py and js["value"] is None
    before = len(server.hits)
    js, py = both(platform, "fetch", "POST", server.url("/echo?from=guest"), '{"n": 1}')
    assert js == py and js["status"] == 200 and json.loads(js["body"])["body"] == '{"n": 1}'
    assert server.hits[before:] == ["POST /echo?from=guest"] * 2
    assert (
        both(platform, "fetch", "GET", server.url("/status/404"), "")
        == [{"status": 404, "type": "text/plain", "body": "status 404"}] * 2
    )  # a status, not an error
    assert both(platform, "fetch", "GET", "http://127.0.0.1:9/", "") == [{"error": "denied"}] * 2
    assert both(platform, "fetch", "GET", "not a url", "") == [{"error": "invalid-request"}] * 2
    js, py = both(platform, "kv", "default", "visits", "2")
    assert js.pop("counts") == [1, 2] and py.pop("counts") == [3, 4]  # one store: the Python guest continues
    assert js == py == {"get": "héllo", "missing": None, "exists": False, "keys": ["visits", "visits.text"]}
    assert both(platform, "kv", "declared", "k", "1") == [{"error": "access-denied"}] * 2


def test_the_sdks_own_checks_throw_classes_with_a_kind(platform: dict[str, App], server: TestServer) -> None:
    before = len(server.hits)
    got = run(platform["js"], "refusals")["ok"]
    assert got["unknown-option"] == {"type": "TypeError", "kind": None, "http": False, "kv": False}
    assert got["kv-bad-key"] == got["kv-bad-value"] == {"type": "KvError", "kind": "other", "http": False, "kv": True}
    http = {"type": "HttpError", "kind": "invalid-request", "http": True, "kv": False}
    assert got["http-bad-timeout"] == got["http-big-body"] == http
    assert got["config-bad-name"]["type"] == "TypeError"
    assert server.hits[before:] == []
