"""`llmhost.ray:app` on the real test cluster (conftest.py): ingress replicas serving an app config's components
behind Ray Serve's HTTP proxy, key-value state shared through a real Redis, a lost replica, the SQLite refusal, Ray's
own `serve run` CLI and `llmhost serve --ray`. The fake engine: no model loads."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import ray
from ray import serve

import llmhost.ray
from llmhost.config import ConfigError
from llmhost.serve_ray.options import APP_NAME, DEPLOYMENT

pytestmark = pytest.mark.wasm
BIN = Path(sys.executable).parent
REPLICA = "x-llmhost-replica"
ANSWER_TIMEOUT_S = 90.0  # a replica's start compiles its components (cached after the first)
REPLICA_CPUS = 0.25  # beside the model replicas of the other tests, on three one-CPU nodes (two real cores)


def app_config(path: Path, wasm: dict[str, Path], cache: Path, replicas: int, store: dict[str, str]) -> Path:
    store_keys = "\n".join(f'{k} = "{v}"' for k, v in store.items())
    path.write_text(
        f"""
cache-dir = "{cache}"
data-dir = "{path.parent / "data"}"

[engine]
kind = "fake"

[serve]
replicas = {replicas}
replica-cpus = {REPLICA_CPUS}

[components.kv]
source = "{wasm["kv_http"]}"
key-value-stores = ["state"]

[components.probe]
source = "{wasm["http_probe"]}"

[key-value.state]
{store_keys}

[routes]
"/kv" = "kv"
"/" = "probe"
"""
    )
    return path


@pytest.fixture
def redis_config(tmp_path: Path, ray_app_wasm: dict[str, Path], llmhost_cache_dir: Path, ray_redis: Any) -> Any:
    ray_redis.flush()

    def make(replicas: int) -> Path:
        store = {"backend": "redis", "url": ray_redis.url}
        return app_config(tmp_path / "app.toml", ray_app_wasm, llmhost_cache_dir, replicas, store)

    return make


@pytest.fixture
def deployed(serve_proxy: str) -> Iterator[str]:
    """The proxy's URL; the app deleted after the test, however it was deployed."""
    yield serve_proxy
    serve.delete(APP_NAME)


class Proxy:
    """HTTP/1.1 to Serve's proxy, a connection per request (Ray's router sees each on its own)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str, bytes]:
        """(status, replica, body); replica "" when no ingress replica answered (Serve's own 404/503)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            return response.status, response.getheader(REPLICA, ""), response.read()
        finally:
            connection.close()

    def wait_answering(self, path: str = "/hello") -> None:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                status, replica, _ = self.request("GET", path)
                if status == 200 and replica:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.25)
        raise AssertionError(f"nothing answered {path} through the proxy within {ANSWER_TIMEOUT_S} s")


def run_app(config: Path) -> None:
    serve.run(llmhost.ray.app({"config": str(config)}), name=APP_NAME, route_prefix="/")


def test_two_replicas_share_redis_state_and_stream(redis_config: Any, deployed: str) -> None:
    run_app(redis_config(replicas=2))
    proxy = Proxy(deployed)
    proxy.wait_answering()
    written: dict[str, str] = {}
    for i in range(24):
        status, replica, body = proxy.request("PUT", f"/kv/k{i}?store=state", f"v{i}".encode())
        assert (status, body) == (200, b"ok")
        written[f"k{i}"] = replica
    assert len(set(written.values())) == 2, f"the writes reached one replica only: {set(written.values())}"
    crossed = 0
    for key, writer in written.items():
        status, reader, body = proxy.request("GET", f"/kv/{key}?store=state")
        assert (status, body) == (200, f"v{key[1:]}".encode())
        crossed += reader != writer
    assert crossed > 0, "no write was read back through the other replica"
    # Streaming streams: the first line arrives long before the last (5 lines, 300 ms apart).
    connection = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
    started = time.monotonic()
    connection.request("GET", "/drip?n=5&ms=300")
    response = connection.getresponse()
    first = response.readline()
    first_at = time.monotonic() - started
    rest = response.read()
    total = time.monotonic() - started
    connection.close()
    assert first == b"tick 0\n" and rest.count(b"tick") == 4
    assert total - first_at > 0.9, f"the stream came at once ({first_at:.2f} s for the first line, {total:.2f} s)"


def test_lost_replica_other_answers_and_no_acknowledged_write_is_lost(redis_config: Any, deployed: str) -> None:
    run_app(redis_config(replicas=2))
    proxy = Proxy(deployed)
    proxy.wait_answering()
    acknowledged: dict[str, str] = {}  # key -> replica that acknowledged it
    stop = threading.Event()
    lock = threading.Lock()

    def writer(number: int) -> None:
        for i in range(100_000):
            if stop.is_set():
                return
            key = f"w{number}-{i}"
            try:
                status, replica, _ = proxy.request("PUT", f"/kv/{key}?store=state", key.encode())
            except (OSError, http.client.HTTPException):
                continue  # cut by the kill: not acknowledged
            if status == 200:
                with lock:
                    acknowledged[key] = replica

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(set(acknowledged.values())) < 2:
            assert time.monotonic() < deadline, "the writes did not reach both replicas"
            time.sleep(0.1)
        victim = next(iter(acknowledged.values()))
        # Named actors need no dashboard (`ray.util.state` does; the test cluster has none).
        named = ray.util.list_named_actors(all_namespaces=True)
        actor = next(a for a in named if a["name"].endswith(f"{DEPLOYMENT}#{victim}"))
        ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=False)
        killed_at, before = time.monotonic(), len(acknowledged)
        # The other replica keeps answering: writes go on being acknowledged after the kill.
        while len(acknowledged) < before + 60:
            assert time.monotonic() - killed_at < 30, "writes stopped being acknowledged after a replica was lost"
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert any(r != victim for r in acknowledged.values())
    for key in acknowledged:
        status, _, body = proxy.request("GET", f"/kv/{key}?store=state")
        assert (status, body) == (200, key.encode()), f"acknowledged write {key} lost"


def test_sqlite_store_with_several_replicas_is_refused(
    tmp_path: Path, ray_app_wasm: dict[str, Path], llmhost_cache_dir: Path
) -> None:
    config = app_config(tmp_path / "app.toml", ray_app_wasm, llmhost_cache_dir, 2, {"backend": "sqlite"})
    with pytest.raises(ConfigError) as refused:
        llmhost.ray.app({"config": str(config)})
    assert 'backend = "redis"' in str(refused.value) and "key-value.state" in str(refused.value)
    assert "\n" not in str(refused.value)
    # The implicit `default` store is SQLite too.
    config.write_text(config.read_text().replace('key-value-stores = ["state"]', 'key-value-stores = ["default"]'))
    with pytest.raises(ConfigError, match='backend = "redis"'):
        llmhost.ray.app({"config": str(config)})
    # One replica may keep its state in a file.
    config = app_config(tmp_path / "one.toml", ray_app_wasm, llmhost_cache_dir, 1, {"backend": "sqlite"})
    assert llmhost.ray.app({"config": str(config)}) is not None


def stopped(process: subprocess.Popen[str]) -> str:
    """Its output, once killed. SIGKILL: on SIGINT `serve run` shuts all of Serve down (every app on the cluster)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    output, _ = process.communicate(timeout=30)
    return output


def test_ray_serve_run_cli(redis_config: Any, deployed: str, ray_cluster: Any) -> None:
    config = redis_config(replicas=1)
    command = [str(BIN / "serve"), "run", "--address", ray_cluster.address, "--name", APP_NAME]
    process = subprocess.Popen(
        [*command, "llmhost.ray:app", f"config={config}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
    )
    problem = None
    try:
        Proxy(deployed).wait_answering()
        status, replica, body = Proxy(deployed).request("PUT", "/kv/cli?store=state", b"x")
        if (status, body) != (200, b"ok") or not replica:
            problem = f"{status} {body!r} from replica {replica!r}"
    except AssertionError as e:
        problem = str(e)
    finally:
        output = stopped(process)
    assert problem is None, f"{problem}\n{output[-3000:]}"


def test_llmhost_serve_ray_prints_the_url(redis_config: Any, deployed: str, ray_cluster: Any) -> None:
    config = redis_config(replicas=1)
    config.write_text(config.read_text() + f'\n[cluster]\nray-address = "{ray_cluster.address}"\n')
    done = subprocess.run(
        [str(BIN / "llmhost"), "serve", "-c", str(config), "--ray"], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    url = done.stdout.strip().splitlines()[-1]
    assert url == deployed
    status, replica, body = Proxy(url).request("GET", "/hello")  # the app keeps running after the command
    assert (status, body.strip()) == (200, b"hello") and replica
