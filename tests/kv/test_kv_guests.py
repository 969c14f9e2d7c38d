"""Key-value state through real guests (componentize-py, `command` world; tests/guests/kv_probe): the raw
`wasi:keyvalue` bindings and the SDK's `llmhost_guest.kv`, through the Python API (`Host.load(...,
key_value_stores=...)`) and `llmhost run` with `[sandbox]` grants; SQLite and a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, HostConfig
from llmhost.config import KeyValueStoreConfig, SandboxConfig
from llmhost.domain.limits import KV_PAGE_KEYS, KV_QUOTA_PREFIX, MAX_KV_HANDLES, MAX_KV_VALUE_BYTES_CEILING
from probe_driver import ProbeOutcome, run_probe
from redis_server import RedisServer

pytestmark = pytest.mark.wasm
LLMHOST = str(Path(sys.executable).with_name("llmhost"))
STORES = ("default", "shared")  # SQLite, Redis


@pytest.fixture
def host(kv_config: HostConfig) -> Iterator[Host]:
    with Host(kv_config) as opened:
        yield opened


def load(host: Host, wasm: Path, stores: list[str] | None = None) -> App:
    return host.load(wasm, key_value_stores=["default", "shared", "small", "large"] if stores is None else stores)


def steps(app: App, store: str, *script: list[Any], api: str = "wit") -> list[dict[str, Any]]:
    outcome = run_probe(app, api, store, json.dumps(list(script)))
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr)
    assert isinstance(outcome.value, list)
    return outcome.value


def ok(results: list[dict[str, Any]]) -> list[Any]:
    assert all("ok" in result for result in results), results
    return [result["ok"] for result in results]


def test_no_grant_is_access_denied(
    kv_config: HostConfig, kv_wasm: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    # The default `[sandbox]` grants no store. WIT's `access-denied` has no message: the SDK names the grant, and
    # the host's log the exact key.
    with Host(kv_config) as host:
        app = host.load(kv_wasm["kv_probe"])
        for api in ("wit", "sdk"):
            outcome = run_probe(app, api, "default", "[]")
            assert outcome.exit_code == 1
            assert outcome.error is not None and outcome.error["kind"] == "access-denied"
        assert outcome.error["message"] == (
            "this key-value store is not granted to this component (`key-value-stores`)"
        )
        assert "key-value store 'default' is not granted to this component (add it to `sandbox.key-value-stores`)" in (
            caplog.text
        )
        denied = run_probe(load(host, kv_wasm["kv_probe"], ["default"]), "wit", "shared", "[]")
        assert denied.error is not None and denied.error["kind"] == "access-denied"


def test_unknown_store_is_no_such_store(host: Host, kv_wasm: dict[str, Path]) -> None:
    app = load(host, kv_wasm["kv_probe"], ["default", "undeclared"])
    for api in ("wit", "sdk"):
        outcome = run_probe(app, api, "undeclared", "[]")
        assert outcome.exit_code == 1
        assert outcome.error is not None and outcome.error["kind"] == "no-such-store", outcome.error


@pytest.mark.parametrize("store", STORES)
def test_every_operation_through_the_wit(host: Host, kv_wasm: dict[str, Path], store: str) -> None:
    app = load(host, kv_wasm["kv_probe"])
    results = steps(
        app,
        store,
        ["get", "k"],
        ["set", "k", "v1"],
        ["get", "k"],
        ["exists", "k"],
        ["exists", "nope"],
        ["incr", "n", 5],
        ["incr", "n", -2],
        ["cas", "k", "v2"],
        ["get", "k"],
        ["cas-race", "k", "other", "v3"],
        ["get", "k"],
        ["set-many", [["a", "1"], ["b", "2"]]],
        ["get-many", ["a", "missing", "b"]],
        ["delete-many", ["a", "missing"]],
        ["delete", "k"],
        ["list", None],
    )
    assert ok(results) == [
        None,
        None,
        "v1",
        True,
        False,
        5,
        3,
        "v1",  # the value the cas saw
        "v2",
        {"failed-first": True, "fresh-current": "other"},  # changed in between: cas-failed with a fresh cas
        "v3",
        None,
        [["a", "1"], None, ["b", "2"]],
        None,
        None,
        {"keys": ["b", "n"], "cursor": None},
    ]


@pytest.mark.parametrize("store", STORES)
def test_bad_input_through_the_wit(host: Host, kv_wasm: dict[str, Path], store: str) -> None:
    app = load(host, kv_wasm["kv_probe"])
    results = steps(
        app,
        store,
        ["nul-key"],
        ["set", "", "x"],
        ["list", "made-up-cursor"],
        ["set", "text", "not a number"],
        ["incr", "text", 1],
        ["set-size", "big", 1024 * 1024 + 1],
    )
    errors = [result.get("err") for result in results]
    assert errors[0] == {"kind": "other", "message": errors[0]["message"]}
    assert "NUL character" in errors[0]["message"]
    assert "must not be empty" in errors[1]["message"]
    assert "was not returned by store" in errors[2]["message"]
    assert errors[3] is None
    assert errors[4]["kind"] == "other" and "the value of 'text' is not a decimal integer" in errors[4]["message"]
    assert errors[5]["message"].startswith(f"{KV_QUOTA_PREFIX}: `key-value.{store}.max-value-bytes`")


def test_sdk(host: Host, kv_wasm: dict[str, Path]) -> None:
    app = load(host, kv_wasm["kv_probe"])
    many = [[f"key-{i:05d}", ""] for i in range(KV_PAGE_KEYS * 2 + 10)]
    ok(steps(app, "default", ["set-many", many]))
    results = steps(
        app,
        "default",
        ["set", "s", "text"],
        ["get", "s"],
        ["exists", "s"],
        ["incr", "c", 1],
        ["incr", "c", 41],
        ["delete", "s"],
        ["get", "s"],
        ["keys"],
        api="sdk",
    )
    assert ok(results)[:7] == [None, "text", True, 1, 42, None, None]
    assert results[7]["ok"] == sorted(["c", *(key for key, _ in many)])  # every page
    quota = steps(
        app,
        "small",
        ["set", "a", "1"],
        ["set", "b", "2"],
        ["set", "c", "3"],
        ["set-size", "a", 65],
        ["bad-key"],
        api="sdk",
    )
    assert [result.get("err", {}).get("kind") for result in quota] == [None, None, "quota", "quota", "other"]
    assert "`key-value.small.max-keys` is 2" in quota[2]["err"]["message"]
    assert "`key-value.small.max-value-bytes` is 64" in quota[3]["err"]["message"]
    assert "invalid key: not valid UTF-8" in quota[4]["err"]["message"]


def test_sdk_json_values_and_deltas_outside_s64(host: Host, kv_wasm: dict[str, Path]) -> None:
    """`Store.set_json`/`get_json` round-trip any JSON value (as the JS SDK's setJson/getJson do), stored as its JSON
    text; an increment delta outside s64 is a KvError naming the range, never a trap in the bindings."""
    app = load(host, kv_wasm["kv_probe"])
    value = {"name": "Ada", "tags": ["é", 1, 2.5, None, True]}
    results = steps(
        app,
        "default",
        ["set-json", "profile", value],
        ["get-json", "profile"],
        ["get", "profile"],
        ["get-json", "unset-json"],
        ["set", "not-json", "{oops"],
        ["get-json", "not-json"],
        ["incr", "n", 2**63],
        ["incr", "n", -(2**63) - 1],
        ["incr", "n", -(2**63)],
        api="sdk",
    )
    assert results[0] == {"ok": None}
    assert results[1] == {"ok": value}
    assert json.loads(results[2]["ok"]) == value
    assert results[3] == {"ok": None}
    assert results[5]["err"]["kind"] == "other" and "is not JSON" in results[5]["err"]["message"]
    for result in results[6:8]:
        assert result["err"]["kind"] == "other" and "s64" in result["err"]["message"], result
    assert results[8] == {"ok": -(2**63)}


def config_file(tmp_path: Path, kv_config: HostConfig, extra: str = "") -> Path:
    shared = kv_config.key_value["shared"]
    path = tmp_path / "llmhost.toml"
    path.write_text(
        f"""
cache-dir = "{kv_config.cache_dir}"
data-dir = "{kv_config.data_dir}"

[engine]
kind = "fake"

[sandbox]
key-value-stores = ["default", "shared"]
{extra}

[key-value.shared]
backend = "redis"
url = "{shared.url}"
"""
    )
    return path


def llmhost_run(config: Path, wasm: Path, *args: str) -> ProbeOutcome:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_DATA_DIR")}
    done = subprocess.run(
        [LLMHOST, "-c", str(config), "run", str(wasm), "--", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    return ProbeOutcome(done.returncode, result.get("ok"), result.get("err"), done.stdout, done.stderr)


@pytest.mark.parametrize("store", STORES)
def test_state_is_kept_across_runs_and_processes(
    tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path], store: str
) -> None:
    config = config_file(tmp_path, kv_config)
    wasm = kv_wasm["kv_probe"]
    # `llmhost run` twice (two processes), then the Python API in this one: one counter, three runs.
    assert [llmhost_run(config, wasm, "count", store, "visits", "1").value for _ in range(2)] == [1, 2]
    with Host(kv_config) as host:
        app = host.load(wasm, key_value_stores=[store])
        assert run_probe(app, "count", store, "visits", "1").value == 3
        assert run_probe(app, "count", store, "visits", "1").value == 4
    assert llmhost_run(config, wasm, "sdk", store, '[["get", "visits"]]').value == [{"ok": "4"}]


def test_two_processes_sharing_redis(tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path]) -> None:
    config = config_file(tmp_path, kv_config)
    wasm = kv_wasm["kv_probe"]
    # Each process sees what the other wrote...
    assert llmhost_run(config, wasm, "sdk", "shared", '[["set", "from-a", "hello"]]').exit_code == 0
    assert llmhost_run(config, wasm, "sdk", "shared", '[["get", "from-a"]]').value == [{"ok": "hello"}]
    # ... and increments from two processes at once (each with its own data dir: two hosts) add up exactly.
    other = tmp_path / "other"
    other.mkdir()
    other_config = config_file(other, kv_config.model_copy(update={"data_dir": other / "data"}))
    count = 100
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_DATA_DIR")}
    processes = [
        subprocess.Popen(
            [LLMHOST, "-c", str(path), "run", str(wasm), "--", "count", "shared", "together", str(count)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for path in (config, other_config)
    ]
    lasts = [json.loads(process.communicate(timeout=300)[0].strip().splitlines()[-1])["ok"] for process in processes]
    assert max(lasts) == 2 * count and min(lasts) >= count  # the later one to finish saw every increment
    assert llmhost_run(other_config, wasm, "sdk", "shared", '[["incr", "together", 0]]').value == [{"ok": 2 * count}]


def test_redis_killed_and_hung_mid_run(tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path]) -> None:
    redis = RedisServer(tmp_path / "flaky-redis").start()
    try:
        config = config_file(
            tmp_path, kv_config, f'timeout-s = 60\n\n[key-value.flaky]\nbackend = "redis"\nurl = "{redis.url}"'
        )
        text = config.read_text().replace(
            'key-value-stores = ["default", "shared"]', 'key-value-stores = ["default", "shared", "flaky"]'
        )
        config.write_text(text)
        env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_DATA_DIR")}
        process = subprocess.Popen(
            [LLMHOST, "-c", str(config), "run", str(kv_wasm["kv_probe"]), "--", "loop", "flaky", "400", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        progress: list[dict[str, Any]] = []
        changed = threading.Condition()

        def read() -> None:
            assert process.stderr is not None
            decoder, buffer = json.JSONDecoder(), ""
            for line in process.stderr:  # JSON objects, however the host's stderr forwarding splits them into lines
                buffer += line.strip()
                while buffer.startswith("{"):
                    try:
                        outcome, end = decoder.raw_decode(buffer)
                    except json.JSONDecodeError:
                        break  # the rest of it is still to come
                    buffer = buffer[end:].lstrip()
                    with changed:
                        progress.append(outcome)
                        changed.notify_all()
                if buffer and not buffer.startswith("{"):
                    buffer = ""  # a host log line

        def wait_for(kind: str, count: int) -> None:
            with changed:
                assert changed.wait_for(lambda: sum(kind in p for p in progress) >= count, timeout=120), progress

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_for("ok", 3)
        redis.kill()  # down: refused at once
        wait_for("err", 3)
        redis.start()  # back: the next calls reconnect
        ok_before = sum("ok" in p for p in progress)
        wait_for("ok", ok_before + 3)
        # Not communicate(): it would read stderr too, beside the reader, and close it under the reader's feet.
        assert process.stdout is not None
        stdout = process.stdout.read()  # to its end: the run's own 60 s deadline bounds it
        process.wait(timeout=30)
        reader.join(timeout=10)
        assert process.returncode == 0
        outcomes = json.loads(stdout.strip().splitlines()[-1])["ok"]
        kinds = "".join("o" if "ok" in o else "e" for o in outcomes)
        assert kinds.startswith("ooo") and kinds.endswith("ooo") and "e" in kinds and "eo" in kinds  # recovered
        errors = [o["err"] for o in outcomes if "err" in o]
        assert all(e["kind"] == "other" and "key-value store 'flaky' (Redis" in e["message"] for e in errors)
        # Hung (SIGSTOP) with a 3 s run deadline: the call gives up before the deadline with `other`.
        config.write_text(text.replace("timeout-s = 60", "timeout-s = 3"))
        redis.pause()
        started = time.monotonic()
        hung = llmhost_run(config, kv_wasm["kv_probe"], "count", "flaky", "k", "1")
        assert time.monotonic() - started < 30  # not the 10 s socket timeout per call, and no hang
        assert hung.error is not None and hung.error["kind"] == "other", (hung.stdout, hung.stderr)
        assert "key-value store 'flaky' (Redis" in hung.error["message"] and "did not answer" in hung.error["message"]
        redis.resume()
        assert llmhost_run(config, kv_wasm["kv_probe"], "count", "flaky", "k", "1").value is not None
    finally:
        redis.stop()


def test_python_api_grants_replace_the_sandbox_ones(kv_config: HostConfig, kv_wasm: dict[str, Path]) -> None:
    granted = kv_config.model_copy(update={"sandbox": SandboxConfig(key_value_stores=("default",))})
    with Host(granted) as host:
        assert run_probe(host.load(kv_wasm["kv_probe"]), "count", "default", "c", "1").value == 1
        denied = run_probe(host.load(kv_wasm["kv_probe"], key_value_stores=[]), "count", "default", "c", "1")
        assert denied.error is not None and denied.error["kind"] == "access-denied"


def test_relative_sqlite_path_is_relative_to_the_config(
    tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path]
) -> None:
    config = config_file(tmp_path, kv_config, '\n[key-value.local]\npath = "state/local.db"')
    config.write_text(config.read_text().replace('["default", "shared"]', '["local"]'))
    assert llmhost_run(config, kv_wasm["kv_probe"], "count", "local", "k", "1").value == 1
    assert (tmp_path / "state" / "local.db").exists()
    assert KeyValueStoreConfig().path is None  # the default store's file is in the data dir (tested with the backends)


def test_largest_values_and_handle_limits(host: Host, kv_wasm: dict[str, Path]) -> None:
    app = load(host, kv_wasm["kv_probe"])
    # The largest value a store may be configured for goes through one guest call and back (a larger one would
    # exhaust wasmtime's hostcall fuel, so the config refuses it).
    size = MAX_KV_VALUE_BYTES_CEILING
    assert ok(steps(app, "large", ["set-size", "big", size], ["get-size", "big"])) == [None, size]
    # A run holds a bounded number of handles (a `cas` keeps a copy of its value); the next run starts afresh.
    for _ in range(2):
        held = ok(steps(app, "default", ["hold-cas", "k", MAX_KV_HANDLES + 5], ["hold-buckets", "default", 100]))
        assert held[0]["opened"] == MAX_KV_HANDLES
        assert held[0]["err"]["kind"] == "other" and "open compare-and-swap handles" in held[0]["err"]["message"]
        assert held[1]["opened"] == MAX_KV_HANDLES - 1  # the steps' own bucket is one of them
