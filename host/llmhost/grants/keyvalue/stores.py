"""The declared key-value stores (`[key-value.NAME]`), each opened on first use and closed with the `Host`.

`Store` is what the interfaces call: it checks keys, values and cursors (the same rules on every backend), bounds
each call by the run's deadline, and leaves the data and the atomic quota checks to the backend.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmhost.config import KeyValueStoreConfig
from llmhost.domain.errors import NoSuchStore, StoreFailure
from llmhost.domain.limits import KV_BACKEND_TIMEOUT_S, KV_PAGE_KEYS
from llmhost.domain.stores import store_file_name
from llmhost.grants.deadline import before_deadline
from llmhost.grants.keyvalue.base import (
    KvBackend,
    StoreLimits,
    check_key,
    check_value,
    decode_cursor,
    encode_cursor,
)


class Store:
    """One store. `time_left`: seconds before the calling run's deadline (None: none); a call never waits past it,
    nor longer than KV_BACKEND_TIMEOUT_S."""

    def __init__(self, limits: StoreLimits, backend: KvBackend) -> None:
        self.limits = limits
        self.name = limits.name
        self.backend = backend

    def _timeout(self, time_left: float | None) -> float:
        if time_left is None:
            return KV_BACKEND_TIMEOUT_S
        if time_left <= 0:
            raise StoreFailure(f"key-value store {self.name!r}: the run's deadline has passed")
        return min(before_deadline(time_left), KV_BACKEND_TIMEOUT_S)

    def get(self, key: str, time_left: float | None = None) -> bytes | None:
        check_key(key)
        return self.backend.get(key, self._timeout(time_left))

    def set(self, key: str, value: bytes, time_left: float | None = None) -> None:
        self.set_many([(key, value)], time_left)

    def delete(self, key: str, time_left: float | None = None) -> None:
        self.delete_many([key], time_left)

    def exists(self, key: str, time_left: float | None = None) -> bool:
        check_key(key)
        return self.backend.exists(key, self._timeout(time_left))

    def list_keys(self, cursor: str | None, time_left: float | None = None) -> tuple[list[str], str | None]:
        """One page of keys in key order (bytewise UTF-8), and the cursor of the next page (None: this was the last).
        A cursor is a position, "after this key", so it never goes stale: keys added or deleted meanwhile are simply
        listed or not; a cursor that this store's `list-keys` did not return is refused."""
        after = None if cursor is None else decode_cursor(self.name, cursor)
        keys = self.backend.keys_after(after, KV_PAGE_KEYS + 1, self._timeout(time_left))
        page = keys[:KV_PAGE_KEYS]
        return page, encode_cursor(self.name, page[-1]) if len(keys) > KV_PAGE_KEYS else None

    def increment(self, key: str, delta: int, time_left: float | None = None) -> int:
        check_key(key)
        return self.backend.increment(key, delta, self._timeout(time_left))

    def swap(
        self, key: str, expected: bytes | None, value: bytes, time_left: float | None = None
    ) -> tuple[bool, bytes | None]:
        check_key(key)
        check_value(self.limits, value)
        return self.backend.swap(key, expected, value, self._timeout(time_left))

    def get_many(self, keys: Sequence[str], time_left: float | None = None) -> list[bytes | None]:
        for key in keys:
            check_key(key)
        return self.backend.get_many(keys, self._timeout(time_left))

    def set_many(self, pairs: Sequence[tuple[str, bytes]], time_left: float | None = None) -> None:
        for key, value in pairs:
            check_key(key)
            check_value(self.limits, value)
        if pairs:
            self.backend.set_many(pairs, self._timeout(time_left))

    def delete_many(self, keys: Sequence[str], time_left: float | None = None) -> None:
        for key in keys:
            check_key(key)
        if keys:
            self.backend.delete_many(keys, self._timeout(time_left))


class KeyValueStores:
    """The stores of one `Host`: `open(name)` creates a store's backend on first use (a SQLite file is created
    then; a Redis store connects on its first call) and shares it between all components and runs."""

    def __init__(self, configs: Mapping[str, KeyValueStoreConfig], data_dir: Path) -> None:
        self.configs = dict(configs)
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._open: dict[str, Store] = {}
        self._closed = False

    def open(self, name: str) -> Store:
        config = self.configs.get(name)
        if config is None:
            raise NoSuchStore(f"no key-value store {name!r} is declared (add a `[key-value.{name}]` table)")
        with self._lock:
            if self._closed:
                raise StoreFailure(f"key-value store {name!r} is closed (the host is stopping)")
            store = self._open.get(name)
            if store is None:  # a failed open is not kept: the next call tries again
                store = self._open[name] = self._create(name, config)
            return store

    def _create(self, name: str, config: KeyValueStoreConfig) -> Store:
        limits = StoreLimits(name, config.max_value_bytes, config.max_keys, config.max_store_bytes)
        if config.backend == "redis":
            from llmhost.grants.keyvalue.redis import RedisBackend

            assert config.url is not None  # the config's validator requires it
            return Store(limits, RedisBackend(limits, config.url))
        from llmhost.grants.keyvalue.sqlite import SqliteBackend

        return Store(limits, SqliteBackend(limits, config.path or self.default_path(name)))

    def default_path(self, name: str) -> Path:
        """Where a SQLite store without a `path` lives: DATA-DIR/kv/NAME.db, or a digest of a name that is not a plain
        file name (`store_file_name`: distinct names, distinct files)."""
        return self.data_dir / "kv" / store_file_name(name)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stores, self._open = list(self._open.values()), {}
        for store in stores:
            store.backend.close()
