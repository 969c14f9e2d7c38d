"""Fixtures of the key-value tests: a real `redis-server` per session, the key-value test guests built once, and
hosts (fake engine: these tests need no model) whose stores live in the test's temporary directory."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmhost import FakeEngineConfig, HostConfig, build_component
from llmhost.config import KeyValueStoreConfig
from llmhost.domain.limits import MAX_KV_VALUE_BYTES_CEILING
from llmhost.grants.keyvalue.stores import KeyValueStores, Store
from redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
KV_GUESTS = {  # name -> (source, world)
    "kv_probe": (REPO / "tests" / "guests" / "kv_probe", None),
    "kv_http": (REPO / "tests" / "guests" / "kv_http", "http-app"),
}
BACKENDS = ("sqlite", "redis")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kv_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The key-value test guests, built once per run (in parallel; cached by content)."""
    out = tmp_path_factory.mktemp("kv-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(build_component, source, out / f"{name}.wasm", world, cache_dir=llmhost_cache_dir)
            for name, (source, world) in KV_GUESTS.items()
        }
        return {name: future.result() for name, future in futures.items()}


def unique_name(request: pytest.FixtureRequest) -> str:
    """A store name of this test alone (tests share the session's Redis)."""
    return "t" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]


def store_config(backend: str, redis: RedisServer | None, **quotas: int) -> KeyValueStoreConfig:
    if backend == "redis":
        assert redis is not None
        return KeyValueStoreConfig(backend="redis", url=redis.url, **quotas)
    return KeyValueStoreConfig(**quotas)


@pytest.fixture
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> Iterator[Callable[..., Store]]:
    """`make_store(backend, name=None, **quotas)`: a store of this test (SQLite in tmp_path, or on the Redis)."""
    opened: list[KeyValueStores] = []

    def make(backend: str, name: str | None = None, **quotas: int) -> Store:
        name = name or unique_name(request)
        stores = KeyValueStores({name: store_config(backend, redis_server, **quotas)}, tmp_path / "data")
        opened.append(stores)
        return stores.open(name)

    yield make
    for stores in opened:
        stores.close()


@pytest.fixture
def kv_config(
    request: pytest.FixtureRequest, tmp_path: Path, llmhost_cache_dir: Path, redis_server: RedisServer
) -> HostConfig:
    """A fake-engine host config with the stores `default` (SQLite in tmp_path), `shared` (on the session's Redis,
    emptied first), `small` (SQLite with quotas) and `large` (the largest values allowed)."""
    redis_server.flush()
    return HostConfig(
        engine=FakeEngineConfig(),
        cache_dir=llmhost_cache_dir,
        data_dir=tmp_path / "data",
        key_value={
            "default": KeyValueStoreConfig(),
            "shared": KeyValueStoreConfig(backend="redis", url=redis_server.url),
            "small": KeyValueStoreConfig(max_value_bytes=64, max_keys=2),
            "large": KeyValueStoreConfig(max_value_bytes=MAX_KV_VALUE_BYTES_CEILING),
        },
    )
