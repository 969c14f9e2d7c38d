"""Key-value state under `llmhost serve` (a real server process, an `http-app` guest, real HTTP clients): every
acknowledged write survives `kill -9` of the server, on SQLite and on Redis; two servers sharing one Redis store
see each other's writes, and their increments add up."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llmhost.config import HostConfig
from serve_driver import Server, serving

pytestmark = pytest.mark.wasm
CLIENTS = 8
ACKNOWLEDGED_BEFORE_KILL = 160  # writes acknowledged (200) before the kill; more are in flight when it lands


def serve_config(path: Path, kv_config: HostConfig, wasm: Path, data_dir: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""
data-dir = "{data_dir}"
shutdown-grace-s = 5

[engine]
kind = "fake"

[components.kv]
source = "{wasm}"
key-value-stores = ["default", "shared"]

[key-value.shared]
backend = "redis"
url = "{kv_config.key_value["shared"].url}"

[routes]
"/" = "kv"
"""
    )
    return path


@contextmanager
def server_on(config: Path, cache_dir: Path) -> Iterator[Server]:
    with serving(["-c", str(config)], cache_dir) as server:
        yield server


@pytest.mark.parametrize("store", ["default", "shared"])
def test_kill_9_loses_no_acknowledged_write(
    tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path], store: str
) -> None:
    config = serve_config(tmp_path / "llmhost.toml", kv_config, kv_wasm["kv_http"], tmp_path / "data")
    acknowledged: dict[str, str] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def client(number: int, server: Server) -> None:
        for i in range(100_000):
            key, value = f"c{number}-{i}", f"value {number} {i} " + "x" * (i % 50)
            try:
                status, _ = server.request("PUT", f"/kv/{key}?store={store}", value.encode())
            except (OSError, http.client.HTTPException):  # the server is gone (mid-answer too): stop writing
                return
            if status != 200:
                return
            with lock:
                acknowledged[key] = value
                if len(acknowledged) >= ACKNOWLEDGED_BEFORE_KILL:
                    enough.set()

    with server_on(config, kv_config.cache_dir) as server:
        threads = [threading.Thread(target=client, args=(n, server)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        assert enough.wait(timeout=240), f"only {len(acknowledged)} writes acknowledged"
        server.process.kill()  # SIGKILL while the clients are writing
        server.process.wait()
        for thread in threads:
            thread.join(timeout=60)
    assert len({key.split("-")[0] for key in acknowledged}) == CLIENTS  # every client wrote

    with server_on(config, kv_config.cache_dir) as server:
        keys = set(json.loads(server.request("GET", f"/keys?store={store}")[1]))
        missing = sorted(set(acknowledged) - keys)
        assert missing == [], f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
        for key, value in acknowledged.items():
            assert server.request("GET", f"/kv/{key}?store={store}") == (200, value.encode())


def test_two_servers_sharing_a_redis_store(tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path]) -> None:
    configs = [
        serve_config(tmp_path / name / "llmhost.toml", kv_config, kv_wasm["kv_http"], tmp_path / name / "data")
        for name in ("a", "b")
    ]
    with server_on(configs[0], kv_config.cache_dir) as a, server_on(configs[1], kv_config.cache_dir) as b:
        assert a.request("PUT", "/kv/greeting?store=shared", b"hello from a")[0] == 200
        assert b.request("GET", "/kv/greeting?store=shared") == (200, b"hello from a")
        assert b.request("PUT", "/kv/greeting?store=shared", b"hello from b")[0] == 200
        assert a.request("GET", "/kv/greeting?store=shared") == (200, b"hello from b")
        # Their SQLite `default` stores are their own.
        assert a.request("PUT", "/kv/local?store=default", b"a only")[0] == 200
        assert b.request("GET", "/kv/local?store=default")[0] == 404
        # Increments from both at once: none lost.
        per_thread, threads = 25, []
        for server in (a, b, a, b):
            thread = threading.Thread(
                target=lambda s=server: [s.request("POST", "/incr/visits?store=shared") for _ in range(per_thread)]
            )
            threads.append(thread)
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert a.request("POST", "/incr/visits?store=shared") == (200, str(4 * per_thread + 1).encode())
