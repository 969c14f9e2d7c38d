"""The SQLite backend (`backend = "sqlite"`, the default): one database file per store.

Durability: WAL mode with `synchronous = FULL`, one transaction per call: a `set` has returned only after its
commit record was fsynced to the WAL, so it survives `kill -9` of the host (which keeps the OS page cache anyway)
and also a power cut or a kernel crash (which `synchronous = NORMAL` would not survive). The fsync costs about a
third of a millisecond per write here (see docs/grants.md, "Key-value state").

Concurrency: every write is one `BEGIN IMMEDIATE` transaction, which takes the database's write lock before it
reads, so read-modify-write calls (`increment`, compare-and-swap, the quota checks) are atomic across threads and
processes; the busy timeout makes a writer wait for the lock (up to the call's timeout) instead of failing.
Connections come from a small pool, one per call in flight, so that threads read in parallel (WAL readers never
block) and no connection outlives the store.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llmhost.domain.errors import StoreFailure
from llmhost.domain.limits import KV_BACKEND_TIMEOUT_S
from llmhost.grants.keyvalue.base import StoreLimits, add_checked, check_growth, parse_counter

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL);
-- The store's totals for the quotas, kept exact by triggers in the same transaction as each write.
CREATE TABLE IF NOT EXISTS kv_totals (id INTEGER PRIMARY KEY CHECK (id = 0), keys INTEGER NOT NULL,
                                      bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO kv_totals VALUES (0, 0, 0);
CREATE TRIGGER IF NOT EXISTS kv_inserted AFTER INSERT ON kv BEGIN
    UPDATE kv_totals SET keys = keys + 1,
        bytes = bytes + length(CAST(NEW.key AS BLOB)) + length(NEW.value) WHERE id = 0;
END;
CREATE TRIGGER IF NOT EXISTS kv_updated AFTER UPDATE ON kv BEGIN
    UPDATE kv_totals SET bytes = bytes + length(NEW.value) - length(OLD.value) WHERE id = 0;
END;
CREATE TRIGGER IF NOT EXISTS kv_deleted AFTER DELETE ON kv BEGIN
    UPDATE kv_totals SET keys = keys - 1,
        bytes = bytes - length(CAST(OLD.key AS BLOB)) - length(OLD.value) WHERE id = 0;
END;
"""
_UPSERT = "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
_IDLE_CONNECTIONS = 8  # kept open for reuse; more calls at once open more, closed after use


class SqliteBackend:
    def __init__(self, limits: StoreLimits, path: Path) -> None:
        self.limits = limits
        self.path = path
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._connection(KV_BACKEND_TIMEOUT_S) as connection:
                # IF NOT EXISTS, under the write lock: safe when several processes open the store at once.
                connection.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
        except OSError as error:
            raise StoreFailure(f"key-value store {limits.name!r}: cannot create {path}: {error}") from None

    # -- connections ---------------------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # WAL: readers and the writer do not block each other, and a commit is one append (+ fsync) to the log.
        # The mode is stored in the file; setting it waits on the busy handler like any lock.
        connection.execute(f"PRAGMA busy_timeout = {int(KV_BACKEND_TIMEOUT_S * 1000)}")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = FULL")
        return connection

    @contextmanager
    def _connection(self, timeout: float) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StoreFailure(f"key-value store {self.limits.name!r} is closed (the host is stopping)")
            connection = self._idle.pop() if self._idle else None
        try:
            if connection is None:
                connection = self._open()
            connection.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
            yield connection
        except sqlite3.Error as error:
            raise self._failure(error, timeout) from None
        finally:
            if connection is not None:
                self._release(connection)

    def _release(self, connection: sqlite3.Connection) -> None:
        try:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            connection.close()
            return
        with self._lock:
            if not self._closed and len(self._idle) < _IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    @contextmanager
    def _write(self, timeout: float) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its start; committed when the block ends without an
        error, rolled back otherwise."""
        with self._connection(timeout) as connection:
            connection.execute("BEGIN IMMEDIATE")
            yield connection
            connection.execute("COMMIT")

    def _failure(self, error: sqlite3.Error, timeout: float) -> StoreFailure:
        text = str(error)
        if "locked" in text or "busy" in text:
            text = f"waited {timeout:.1f} s for the database's write lock, which another writer holds"
        return StoreFailure(f"key-value store {self.limits.name!r} (SQLite, {self.path}): {text}")

    # -- operations ---------------------------------------------------------------------------------------------
    def get(self, key: str, timeout: float) -> bytes | None:
        with self._connection(timeout) as connection:
            row = connection.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def exists(self, key: str, timeout: float) -> bool:
        with self._connection(timeout) as connection:
            return connection.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone() is not None

    def get_many(self, keys: Sequence[str], timeout: float) -> list[bytes | None]:
        with self._connection(timeout) as connection:
            connection.execute("BEGIN")  # one snapshot for all the keys
            rows = [connection.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone() for key in keys]
            connection.execute("COMMIT")
        return [None if row is None else bytes(row[0]) for row in rows]

    def keys_after(self, after: str | None, limit: int, timeout: float) -> list[str]:
        with self._connection(timeout) as connection:
            if after is None:
                rows = connection.execute("SELECT key FROM kv ORDER BY key LIMIT ?", (limit,)).fetchall()
            else:
                rows = connection.execute(
                    "SELECT key FROM kv WHERE key > ? ORDER BY key LIMIT ?", (after, limit)
                ).fetchall()
        return [str(row[0]) for row in rows]

    def set_many(self, pairs: Sequence[tuple[str, bytes]], timeout: float) -> None:
        """All the pairs in one transaction: all are stored, or (a quota) none."""
        with self._write(timeout) as connection:
            self._check_quota(connection, pairs)
            connection.executemany(_UPSERT, pairs)

    def delete_many(self, keys: Sequence[str], timeout: float) -> None:
        with self._write(timeout) as connection:
            connection.executemany("DELETE FROM kv WHERE key = ?", [(key,) for key in keys])

    def increment(self, key: str, delta: int, timeout: float) -> int:
        with self._write(timeout) as connection:
            row = connection.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            value = add_checked(key, parse_counter(key, None if row is None else bytes(row[0])), delta)
            encoded = str(value).encode()
            self._check_quota(connection, [(key, encoded)])
            connection.execute(_UPSERT, (key, encoded))
        return value

    def swap(self, key: str, expected: bytes | None, value: bytes, timeout: float) -> tuple[bool, bytes | None]:
        with self._write(timeout) as connection:
            row = connection.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            current = None if row is None else bytes(row[0])
            if current != expected:
                return False, current  # the transaction wrote nothing; committing it is free
            self._check_quota(connection, [(key, value)])
            connection.execute(_UPSERT, (key, value))
        return True, None

    def _check_quota(self, connection: sqlite3.Connection, pairs: Sequence[tuple[str, bytes]]) -> None:
        if self.limits.max_keys is None and self.limits.max_store_bytes is None:
            return
        keys, total = connection.execute("SELECT keys, bytes FROM kv_totals WHERE id = 0").fetchone()
        sizes: dict[str, int | None] = {}  # each key's size (key + value) as the write leaves it; None: new
        new_keys = added = 0
        for key, value in pairs:
            if key not in sizes:
                row = connection.execute("SELECT length(value) FROM kv WHERE key = ?", (key,)).fetchone()
                sizes[key] = None if row is None else len(key.encode()) + int(row[0])
            before = sizes[key]
            after = len(key.encode()) + len(value)
            new_keys += before is None
            added += after - (before or 0)
            sizes[key] = after
        check_growth(self.limits, int(keys), int(total), new_keys, added)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
