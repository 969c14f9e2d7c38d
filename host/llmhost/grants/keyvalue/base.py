"""What every key-value backend shares: the backend protocol, and the pure checks (keys, quotas, cursors, counters).

Backends (`sqlite.py`, `redis.py`) store bytes under UTF-8 keys and enforce `max-keys` and `max-store-bytes` inside
their own atomic step (a SQLite write transaction, a Redis Lua script), with the messages built here. Keys are
ordered bytewise (SQLite's BINARY collation and Redis's ZRANGEBYLEX both compare UTF-8 with memcmp), so a
`list-keys` cursor means the same on both: "the keys after this one".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from llmhost.domain.errors import LlmError, StoreFailure
from llmhost.domain.limits import KV_QUOTA_PREFIX, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES
from llmhost.domain.redaction import describe_key, redact_quoted

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
# A counter's value, as `increment` reads and writes it: an optional minus sign and digits without leading zeros
# (Redis's own rule for INCRBY, so both backends accept exactly the same values).
_INTEGER = re.compile(rb"0|-?[1-9][0-9]*")
_CURSOR_PREFIX = "kv1"


@dataclass(frozen=True)
class StoreLimits:
    """One store's name and quotas (`[key-value.NAME]`); None: no limit."""

    name: str
    max_value_bytes: int = MAX_KV_VALUE_BYTES
    max_keys: int | None = None
    max_store_bytes: int | None = None

    def key(self, setting: str) -> str:
        """A quota's config key, as messages name it: `key-value.NAME.max-keys`."""
        return f"key-value.{self.name}.{setting}"


class KvBackend(Protocol):
    """One store's data. `timeout`: seconds the call may wait for the backend (a lock, a round trip) before it fails
    with `StoreFailure`. Keys and values arrive checked (`check_key`, `check_value`); `max-keys` and
    `max-store-bytes` are the backend's to enforce atomically with the write (`check_growth`)."""

    def get(self, key: str, timeout: float) -> bytes | None: ...
    def set_many(self, pairs: Sequence[tuple[str, bytes]], timeout: float) -> None: ...
    def delete_many(self, keys: Sequence[str], timeout: float) -> None: ...
    def exists(self, key: str, timeout: float) -> bool: ...
    def get_many(self, keys: Sequence[str], timeout: float) -> list[bytes | None]: ...
    def keys_after(self, after: str | None, limit: int, timeout: float) -> list[str]:
        """Up to `limit` keys greater than `after` (bytewise), in order."""
        ...

    def increment(self, key: str, delta: int, timeout: float) -> int: ...
    def swap(self, key: str, expected: bytes | None, value: bytes, timeout: float) -> tuple[bool, bytes | None]:
        """Set `key` to `value` if it still holds `expected` (None: unset); (swapped, the value found if not)."""
        ...

    def close(self) -> None: ...


class KeyFailure(StoreFailure):
    """A `StoreFailure` whose message quotes a key by `describe_key` (its first characters). Scrubbing it masks that
    quote whole when the key holds one of the component's secrets: the characters shown may be part of it."""

    def __init__(self, message: str, key: str, *also: str) -> None:
        super().__init__(message)
        self.key = key
        self.also = also  # other forms of the key to check (the key a cursor encodes)

    def scrubbed(self, scrub: Callable[[str], str]) -> LlmError:
        message = scrub(redact_quoted(self.message, self.key, scrub, self.also))
        return self if message == self.message else StoreFailure(message)


# -- keys and values ------------------------------------------------------------------------------------------------


def check_key(key: str) -> bytes:
    """The key's UTF-8 bytes; `StoreFailure` naming the problem for an empty, too long or unencodable key, or one
    with NUL (which C clients of the same store would cut short)."""
    if not key:
        raise StoreFailure("invalid key: a key must not be empty")
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError as error:
        raise StoreFailure(f"invalid key: not valid UTF-8 (a lone surrogate at character {error.start})") from None
    if len(encoded) > MAX_KV_KEY_BYTES:
        raise KeyFailure(
            f"invalid key: {len(encoded)} bytes of UTF-8, more than the {MAX_KV_KEY_BYTES} a key may have "
            f"({describe_key(key)})",
            key,
        )
    nul = key.find("\0")
    if nul >= 0:
        raise KeyFailure(f"invalid key: it contains a NUL character at position {nul} ({describe_key(key)})", key)
    return encoded


def check_value(limits: StoreLimits, value: bytes) -> None:
    if len(value) > limits.max_value_bytes:
        raise quota_error(
            limits.key("max-value-bytes"),
            limits.max_value_bytes,
            f"the value is {len(value):,} bytes (store smaller values, or raise it in the config)",
        )


# -- quotas -----------------------------------------------------------------------------------------------------------


def quota_error(key: str, limit: int, detail: str) -> StoreFailure:
    """A quota's error: `other`, with a message that starts with KV_QUOTA_PREFIX and names the config key."""
    return StoreFailure(f"{KV_QUOTA_PREFIX}: `{key}` is {limit:,}; {detail}")


def check_growth(limits: StoreLimits, keys: int, total: int, new_keys: int, added_bytes: int) -> None:
    """Raise the quota error if a write that adds `new_keys` keys and `added_bytes` bytes (keys and values; may be
    negative) to a store holding `keys` keys of `total` bytes would pass `max-keys` or `max-store-bytes`. A write
    that does not grow the store is always allowed (replacing a value with a smaller one frees room)."""
    error = growth_error(limits, keys, total, new_keys, added_bytes)
    if error is not None:
        raise error


def growth_error(limits: StoreLimits, keys: int, total: int, new_keys: int, added_bytes: int) -> StoreFailure | None:
    if limits.max_keys is not None and new_keys > 0 and keys + new_keys > limits.max_keys:
        return quota_error(
            limits.key("max-keys"),
            limits.max_keys,
            f"the store holds {keys:,} keys and this would add {new_keys:,} (delete some, or raise it in the config)",
        )
    if limits.max_store_bytes is not None and added_bytes > 0 and total + added_bytes > limits.max_store_bytes:
        return quota_error(
            limits.key("max-store-bytes"),
            limits.max_store_bytes,
            f"the store holds {total:,} bytes of keys and values and this would add {added_bytes:,} (delete some, "
            "or raise it in the config)",
        )
    return None


# -- counters ---------------------------------------------------------------------------------------------------------


def parse_counter(key: str, value: bytes | None) -> int:
    """The integer a counter holds (unset: 0); `StoreFailure` naming the key when it holds anything else."""
    if value is None:
        return 0
    if _INTEGER.fullmatch(value) and I64_MIN <= int(value) <= I64_MAX:
        return int(value)
    raise not_a_counter(key)


def not_a_counter(key: str) -> StoreFailure:
    return KeyFailure(
        f"increment: the value of {describe_key(key)} is not a decimal integer in the signed 64-bit range (set it to "
        "one, or delete it, first)",
        key,
    )


def add_checked(key: str, current: int, delta: int) -> int:
    result = current + delta
    if not I64_MIN <= result <= I64_MAX:
        raise KeyFailure(
            f"increment: {describe_key(key)} would overflow a signed 64-bit integer ({current} + {delta})", key
        )
    return result


# -- list-keys cursors ------------------------------------------------------------------------------------------------


def encode_cursor(store: str, last_key: str) -> str:
    """An opaque cursor: the last key of the page, and a check that it was made by this store's `list-keys` (so that
    a made-up, cut or edited cursor, or another store's, is refused rather than silently listing from elsewhere)."""
    body = base64.urlsafe_b64encode(last_key.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{_CURSOR_PREFIX}.{body}.{_cursor_check(store, body)}"


def decode_cursor(store: str, cursor: str) -> str:
    """The last key a cursor of `encode_cursor` names; `StoreFailure` for anything else."""
    parts = cursor.split(".")
    also = _decoded(parts[1]) if len(parts) == 3 else ()
    if len(parts) == 3 and parts[0] == _CURSOR_PREFIX and hmac.compare_digest(parts[2], _cursor_check(store, parts[1])):
        try:
            return base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode("utf-8")
        except (binascii.Error, ValueError):
            pass
    raise KeyFailure(
        f"list-keys: the cursor {describe_key(cursor)} was not returned by store {store!r}'s list-keys (pass the "
        "cursor of the previous page unchanged, or none for the first page)",
        cursor,
        *also,
    )


def _decoded(body: str) -> tuple[str, ...]:
    """The key a cursor's body encodes, if it decodes (a cursor shows its key's first characters in base64)."""
    try:
        return (base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", "replace"),)
    except (binascii.Error, ValueError):
        return ()


def _cursor_check(store: str, body: str) -> str:
    # Not a secret: listing from any key is allowed anyway. The digest only tells a real cursor from a wrong one.
    return hashlib.sha256(f"{store}\0{body}".encode()).hexdigest()[:16]
