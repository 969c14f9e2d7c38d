"""The key-value stores from Python, on both backends: a SQLite file in the test's directory and a real redis-server.

Keys, quotas, cursors, counters, compare-and-swap and batches behave the same on both; increments and
compare-and-swap lose no update with 16 threads or 16 processes at once; Redis faults are `other` errors naming the
store, bounded by the deadline, and the store recovers when Redis is back.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from llmhost.config import KeyValueStoreConfig
from llmhost.domain.errors import NoSuchStore, StoreFailure
from llmhost.domain.limits import KV_PAGE_KEYS, KV_QUOTA_PREFIX, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES_CEILING
from llmhost.grants.keyvalue.base import decode_cursor, encode_cursor, parse_counter
from llmhost.grants.keyvalue.stores import KeyValueStores, Store
from redis_server import RedisServer

from .conftest import BACKENDS, store_config

MakeStore = Callable[..., Store]
CLIENTS = 16


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_values_are_bytes_and_keys_unicode(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    assert store.get("missing") is None and not store.exists("missing")
    store.set("bin", b"\x00\xff\x00")
    store.set("empty", b"")
    store.set("ключ-鍵-🔑", b"unicode key")
    assert store.get("bin") == b"\x00\xff\x00"
    assert store.get("empty") == b"" and store.exists("empty")
    assert store.get("ключ-鍵-🔑") == b"unicode key"
    store.set("bin", b"replaced")
    assert store.get("bin") == b"replaced"
    store.delete("bin")
    store.delete("bin")  # deleting an unset key is no error
    assert store.get("bin") is None
    assert store.list_keys(None) == (sorted(["empty", "ключ-鍵-🔑"], key=str.encode), None)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "must not be empty"),
        ("k" * (MAX_KV_KEY_BYTES + 1), f"more than the {MAX_KV_KEY_BYTES}"),
        ("é" * (MAX_KV_KEY_BYTES // 2 + 1), "bytes of UTF-8"),  # counted in bytes, not characters
        ("a\0b", "NUL character at position 1"),
        ("lone\ud800surrogate", "not valid UTF-8"),
    ],
)
def test_bad_keys_are_refused_on_every_operation(make_store: MakeStore, backend: str, key: str, problem: str) -> None:
    store = make_store(backend)
    calls: list[Callable[[], object]] = [
        lambda: store.get(key),
        lambda: store.set(key, b"v"),
        lambda: store.delete(key),
        lambda: store.exists(key),
        lambda: store.increment(key, 1),
        lambda: store.swap(key, None, b"v"),
        lambda: store.get_many(["fine", key]),
        lambda: store.set_many([("fine", b"v"), (key, b"v")]),
        lambda: store.delete_many([key]),
    ]
    for call in calls:
        with pytest.raises(StoreFailure, match="invalid key") as failure:
            call()
        assert problem in failure.value.message
    assert store.list_keys(None) == ([], None)  # set-many refused the whole batch
    store.set("k" * MAX_KV_KEY_BYTES, b"the longest key")
    assert store.get("k" * MAX_KV_KEY_BYTES) == b"the longest key"


def test_max_value_bytes(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend, max_value_bytes=100)
    store.set("at-limit", b"x" * 100)
    with pytest.raises(StoreFailure) as failure:
        store.set("over", b"x" * 101)
    message = failure.value.message
    assert message.startswith(KV_QUOTA_PREFIX) and f"`key-value.{store.name}.max-value-bytes` is 100" in message
    with pytest.raises(StoreFailure, match="max-value-bytes"):
        store.swap("over", None, b"x" * 101)
    with pytest.raises(StoreFailure, match="max-value-bytes"):
        store.set_many([("a", b"x"), ("over", b"x" * 101)])
    assert store.list_keys(None) == (["at-limit"], None)


def test_max_keys(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend, max_keys=3)
    for key in ("a", "b", "c"):
        store.set(key, b"1")
    store.set("a", b"replacing a value adds no key")
    for call in (
        lambda: store.set("d", b"1"),
        lambda: store.increment("d", 1),
        lambda: store.swap("d", None, b"1"),
        lambda: store.set_many([("a", b"2"), ("d", b"1")]),
    ):
        with pytest.raises(StoreFailure) as failure:
            call()
        assert failure.value.message.startswith(f"{KV_QUOTA_PREFIX}: `key-value.{store.name}.max-keys` is 3")
        assert "holds 3 keys" in failure.value.message
    assert store.get("a") == b"replacing a value adds no key"  # the refused batch wrote nothing
    store.delete("c")
    store.set("d", b"room again")
    assert store.list_keys(None) == (["a", "b", "d"], None)


def test_max_store_bytes_counts_keys_and_values_in_utf8(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend, max_store_bytes=20)
    store.set("é", b"x" * 8)  # 2 + 8 bytes
    store.set("k2", b"x" * 8)  # 2 + 8: exactly 20
    with pytest.raises(StoreFailure) as failure:
        store.set("k3", b"")
    assert f"`key-value.{store.name}.max-store-bytes` is 20" in failure.value.message
    assert "holds 20 bytes" in failure.value.message
    store.set("k2", b"x" * 2)  # shrinking a value is always allowed, and frees room
    store.set("k3", b"x" * 4)
    with pytest.raises(StoreFailure, match="max-store-bytes"):
        store.increment("k4", 1)
    store.delete_many(["é", "k2", "k3"])
    store.set("big", b"x" * 17)


def test_list_keys_pages_in_key_order(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    keys = [f"key-{i:05d}" for i in range(2 * KV_PAGE_KEYS + 500)]
    for start in range(0, len(keys), 500):
        store.set_many([(key, b"") for key in keys[start : start + 500]])
    pages, cursor = [], None
    while True:
        page, cursor = store.list_keys(cursor)
        pages.append(page)
        if cursor is None:
            break
    assert [len(page) for page in pages] == [KV_PAGE_KEYS, KV_PAGE_KEYS, 500]
    assert [key for page in pages for key in page] == keys
    # A cursor is a position: deleting the key it names, or adding keys behind it, does not make it stale.
    first, cursor = store.list_keys(None)
    assert cursor is not None
    store.delete(first[-1])
    store.set("key-00000-new", b"")  # before the cursor: not listed on the next page
    store.set("key-99999", b"")
    rest = []
    while cursor is not None:
        page, cursor = store.list_keys(cursor)
        rest += page
    assert rest == [*keys[KV_PAGE_KEYS:], "key-99999"]


@pytest.mark.parametrize(
    "cursor",
    ["", "made-up", "kv1.a2V5.0000000000000000", "kv1.a2V5", "kv1.!!!.x", "kv1.a2V5.0123456789abcdef.extra"],
)
def test_made_up_cursors_are_refused(make_store: MakeStore, backend: str, cursor: str) -> None:
    store = make_store(backend)
    with pytest.raises(StoreFailure, match="list-keys: the cursor .* was not returned by store"):
        store.list_keys(cursor)


def test_cursor_of_another_store_or_edited_is_refused(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    real = encode_cursor(store.name, "key-5")
    assert decode_cursor(store.name, real) == "key-5"
    with pytest.raises(StoreFailure, match="was not returned by store"):
        store.list_keys(encode_cursor("another-store", "key-5"))
    prefix, body, check = real.split(".")
    edited = f"{prefix}.{body[:-1]}{'A' if body[-1] != 'A' else 'B'}.{check}"
    with pytest.raises(StoreFailure, match="was not returned by store"):
        store.list_keys(edited)


def test_increment(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    assert store.increment("n", 5) == 5
    assert store.increment("n", -7) == -2
    assert store.get("n") == b"-2"  # a counter is its decimal text: readable with get, settable with set
    store.set("n", b"41")
    assert store.increment("n", 1) == 42
    assert store.increment("big", 2**63 - 1) == 2**63 - 1
    with pytest.raises(StoreFailure, match="overflow"):
        store.increment("big", 1)
    assert store.get("big") == str(2**63 - 1).encode()
    for bad in (b"1.5", b"007", b" 1", b"+1", b"abc", b"", b"-0", str(2**63).encode()):
        store.set("text", bad)
        with pytest.raises(StoreFailure, match="the value of 'text' is not a decimal integer"):
            store.increment("text", 1)
        assert store.get("text") == bad


def test_max_value_bytes_has_a_ceiling() -> None:
    with pytest.raises(ValidationError, match="max_value_bytes"):
        KeyValueStoreConfig(max_value_bytes=MAX_KV_VALUE_BYTES_CEILING + 1)


def test_counter_rule_is_pure() -> None:
    assert [parse_counter("k", v) for v in (None, b"0", b"-12", b"9223372036854775807")] == [0, 0, -12, 2**63 - 1]
    with pytest.raises(StoreFailure):
        parse_counter("k", b"-9223372036854775809")


def test_compare_and_swap(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    assert store.swap("k", None, b"first") == (True, None)  # expected unset, is unset
    assert store.swap("k", None, b"again") == (False, b"first")  # expected unset, is set
    assert store.swap("k", b"first", b"second") == (True, None)
    assert store.swap("k", b"first", b"third") == (False, b"second")
    store.delete("k")
    assert store.swap("k", b"second", b"x") == (False, None)
    assert store.get("k") is None


def test_batches(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    store.set_many([("a", b"1"), ("b", b"2"), ("a", b"3")])  # a repeated key: the last value wins
    assert store.get_many(["a", "missing", "b"]) == [b"3", None, b"2"]
    store.delete_many(["a", "missing"])
    assert store.get_many(["a", "b"]) == [None, b"2"]
    assert store.get_many([]) == []
    store.set_many([])
    store.delete_many([])


def test_stores_are_declared_and_separate(tmp_path: Path, redis_server: RedisServer) -> None:
    stores = KeyValueStores(
        {name: store_config(backend, redis_server) for name, backend in (("s1", "redis"), ("s2", "redis"))},
        tmp_path,
    )
    try:
        with pytest.raises(NoSuchStore, match=r"add a `\[key-value.nope\]` table"):
            stores.open("nope")
        stores.open("s1").set("k", b"one")
        stores.open("s2").set("k", b"two")  # one Redis, two stores: each its own keys
        assert (stores.open("s1").get("k"), stores.open("s2").get("k")) == (b"one", b"two")
        assert stores.open("s1") is stores.open("s1")  # opened once, shared
    finally:
        stores.close()
    with pytest.raises(StoreFailure, match="closed"):
        stores.open("s1")


def test_sqlite_store_is_durable_wal(tmp_path: Path) -> None:
    stores = KeyValueStores({"default": store_config("sqlite", None)}, tmp_path / "data")
    try:
        stores.open("default").set("k", b"v")
        path = tmp_path / "data" / "kv" / "default.db"  # the data directory, never the cache's
        assert path.exists()
        with sqlite3.connect(path) as connection:
            assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        with stores.open("default").backend._connection(1.0) as connection:  # type: ignore[attr-defined]
            assert connection.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL: fsync at every commit
    finally:
        stores.close()
    assert stores.default_path("../escape") == tmp_path / "data" / "kv" / stores.default_path("../escape").name
    assert "/" not in stores.default_path("../escape").name.replace(".db", "")


# -- concurrency: 16 clients, no lost update ----------------------------------------------------------------------


def test_concurrent_increments_and_swaps_from_threads(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    per_client = 50
    errors: list[BaseException] = []

    def client() -> None:
        try:
            for _ in range(per_client):
                store.increment("counter", 1)
                while True:  # an increment by compare-and-swap: retried until no one wrote in between
                    current = store.get("cas-counter")
                    swapped, _ = store.swap("cas-counter", current, str(int(current or b"0") + 1).encode())
                    if swapped:
                        break
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.get("counter") == str(CLIENTS * per_client).encode()
    assert store.get("cas-counter") == str(CLIENTS * per_client).encode()


WORKER = """
import json, sys
from pathlib import Path
from llmhost.config import KeyValueStoreConfig
from llmhost.grants.keyvalue.stores import KeyValueStores
config, data_dir, name, count = json.loads(sys.argv[1])
stores = KeyValueStores({name: KeyValueStoreConfig(**config)}, Path(data_dir))
store = stores.open(name)
for _ in range(count):
    store.increment("counter", 1)
stores.close()
"""


def test_concurrent_increments_from_processes(
    make_store: MakeStore, backend: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    store = make_store(backend)  # the same store (name, file or Redis) as the processes open
    per_client = 40
    config = store_config(backend, redis_server).model_dump(exclude_none=True)
    argument = json.dumps([config, str(tmp_path / "data"), store.name, per_client])
    processes = [subprocess.Popen([sys.executable, "-c", WORKER, argument]) for _ in range(CLIENTS)]
    assert [process.wait(timeout=300) for process in processes] == [0] * CLIENTS
    assert store.increment("counter", 0) == CLIENTS * per_client


# -- deadlines and Redis faults ---------------------------------------------------------------------------------


def test_a_passed_deadline_fails_at_once(make_store: MakeStore, backend: str) -> None:
    store = make_store(backend)
    with pytest.raises(StoreFailure, match=f"store '{store.name}': the run's deadline has passed"):
        store.set("k", b"v", time_left=0.0)


def test_sqlite_write_lock_held_elsewhere(make_store: MakeStore, tmp_path: Path) -> None:
    store = make_store("sqlite")
    store.set("k", b"before")
    other = sqlite3.connect(tmp_path / "data" / "kv" / f"{store.name}.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
        assert store.get("k") == b"before"  # WAL: readers do not wait for it
        started = time.monotonic()
        with pytest.raises(StoreFailure, match="waited 0.9 s for the database's write lock"):
            store.set("k", b"after", time_left=1.0)
        assert time.monotonic() - started < 5.0
        other.execute("ROLLBACK")
        store.set("k", b"after", time_left=1.0)
        assert store.get("k") == b"after"
    finally:
        other.close()


def test_redis_down_hung_and_back(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    stores = KeyValueStores({"flaky": store_config("redis", redis)}, tmp_path)
    try:
        store = stores.open("flaky")
        store.set("k", b"before")
        # Killed: refused at once, an `other` naming the store and the URL.
        redis.kill()
        started = time.monotonic()
        with pytest.raises(StoreFailure) as failure:
            store.get("k", time_left=5.0)
        assert "key-value store 'flaky' (Redis, redis://127.0.0.1:" in failure.value.message
        assert "cannot reach Redis" in failure.value.message
        assert time.monotonic() - started < 5.0
        # Back (empty: no snapshots in the tests): the next call reconnects.
        redis.start()
        assert store.get("k") is None
        store.set("k", b"after")
        # Hung (SIGSTOP: connected, no answer): the call gives up when the run's deadline comes.
        redis.pause()
        started = time.monotonic()
        with pytest.raises(StoreFailure, match="Redis did not answer within 0.9 s"):
            store.increment("n", 1, time_left=1.0)
        assert time.monotonic() - started < 4.0  # the deadline (1 s) and scheduling slack, not the socket timeout
        redis.resume()
        assert store.get("k") == b"after"
    finally:
        stores.close()
        redis.stop()
