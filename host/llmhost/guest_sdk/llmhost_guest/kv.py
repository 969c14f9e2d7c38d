"""Key-value state through the standard `wasi:keyvalue` interfaces: stores the operator declared and granted.

from llmhost_guest import kv
visits = kv.open().increment("visits")          # the "default" store
kv.open("cache").set("answer", "42")            # str values are stored as UTF-8
print(kv.open("cache").get("answer"))            # b"42" (None when unset)
kv.open("cache").set_json("user", {"name": "Ada"})  # any JSON value (the JS SDK's setJson/getJson)

Every failure raises `KvError`, whose `.kind` is "no-such-store", "access-denied", "quota" (a quota of the store:
the message names its config key) or "other" (an invalid key, the backend unreachable...).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["KvError", "Store", "open"]

# The host starts every quota error's message with this (llmhost's `KV_QUOTA_PREFIX`).
_QUOTA_PREFIX = "quota exceeded"
# `wasi:keyvalue/atomics.increment` takes an s64: a delta outside it would fail in the bindings, trapping the guest.
_S64_MIN, _S64_MAX = -(2**63), 2**63 - 1
_KINDS = {"Error_NoSuchStore": "no-such-store", "Error_AccessDenied": "access-denied", "Error_Other": "other"}


class KvError(Exception):
    """A key-value call failed: `kind` ("no-such-store", "access-denied", "quota", "other") and the host's message."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


def _error(error: Any) -> KvError:
    """The exception for a WIT `wasi:keyvalue/store.error` value."""
    kind = _KINDS.get(type(error).__name__, "other")
    message = str(getattr(error, "value", "") or "")
    if kind == "no-such-store" and not message:
        message = "no such key-value store is declared by the host"
    elif kind == "access-denied" and not message:
        message = "this key-value store is not granted to this component (`key-value-stores`)"
    elif kind == "other" and message.startswith(_QUOTA_PREFIX):
        kind = "quota"
    return KvError(kind, message)


def _call(function: Any, *args: Any) -> Any:
    from componentize_py_types import Err

    try:
        return function(*args)
    except Err as failure:
        raise _error(failure.value) from None


def _key(key: str) -> str:
    # A str with lone surrogates cannot become a WIT string: refuse it here, with the host's wording, rather than
    # let the bindings fail while lowering it.
    if not isinstance(key, str):
        raise KvError("other", f"invalid key: a key is a str, not {type(key).__name__}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as error:
        raise KvError("other", f"invalid key: not valid UTF-8 (a lone surrogate at character {error.start})") from None
    return key


def _bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise KvError("other", f"invalid value: not valid UTF-8 (at character {error.start})") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise KvError("other", f"a value is bytes or str, not {type(value).__name__}")


class Store:
    """One open store (a WIT `bucket`). Get it with `kv.open(name)`."""

    def __init__(self, name: str, bucket: Any) -> None:
        self.name = name
        self._bucket = bucket

    def get(self, key: str) -> bytes | None:
        """The value of `key`, or None when it is not set."""
        value = _call(self._bucket.get, _key(key))
        return None if value is None else bytes(value)

    def set(self, key: str, value: bytes | str) -> None:
        """Store `value` under `key` (a str as UTF-8); durable once it returns."""
        _call(self._bucket.set, _key(key), _bytes(value))

    def get_json(self, key: str) -> Any:
        """The value of `key` parsed as JSON (UTF-8), or None when it is not set."""
        value = self.get(key)
        if value is None:
            return None
        try:
            return json.loads(value.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise KvError("other", f"the value of {key!r} is not JSON: {error}") from None

    def set_json(self, key: str, value: Any) -> None:
        """Store `value` as JSON text (`json.dumps`, UTF-8) under `key`; durable once it returns."""
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise KvError("other", f"invalid value: not JSON-serializable ({error})") from None
        self.set(key, text)

    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens when it is not set)."""
        _call(self._bucket.delete, _key(key))

    def exists(self, key: str) -> bool:
        return bool(_call(self._bucket.exists, _key(key)))

    def keys(self) -> list[str]:
        """Every key, in key order (all pages of `list-keys`)."""
        keys: list[str] = []
        cursor = None
        while True:
            page = _call(self._bucket.list_keys, cursor)
            keys.extend(page.keys)
            cursor = page.cursor
            if cursor is None:
                return keys

    def increment(self, key: str, delta: int = 1) -> int:
        """Add `delta` to the integer at `key` (unset: 0) and return the new value, atomically (no update is lost
        when many instances or hosts increment at once)."""
        from wit_world.imports import atomics

        if isinstance(delta, bool) or not isinstance(delta, int):
            raise KvError("other", f"invalid delta: an int, not {type(delta).__name__}")
        if not _S64_MIN <= delta <= _S64_MAX:
            raise KvError("other", f"invalid delta: {delta} is outside the signed 64-bit range (s64)")
        return int(_call(atomics.increment, self._bucket, _key(key), delta))

    def __repr__(self) -> str:
        return f"kv.Store({self.name!r})"


_opened: dict[str, Store] = {}


def open(name: str = "default") -> Store:
    """The store `name` (one bucket per store and instance: opening it again returns the same `Store`)."""
    store = _opened.get(name)
    if store is None:
        from wit_world.imports import wasi_keyvalue_store

        store = _opened[name] = Store(name, _call(wasi_keyvalue_store.open, name))
    return store
