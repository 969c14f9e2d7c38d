"""The Redis backend (`backend = "redis"`, `url`): a store several llmhost processes, on several machines, share.

Layout: store NAME lives under the keys `llmhost:kv:{NAME}:*` (the braces keep them in one Redis Cluster slot), so
any number of stores share one Redis: `data` (a hash: key -> value), `index` (a sorted set of the keys, for
`list-keys` in key order: the same cursors as SQLite's) and `bytes` (the store's keys and values, for
`max-store-bytes`). Every write is one Lua script, so each is atomic with its quota check and its bookkeeping, across
threads, processes and hosts; `increment` is HINCRBY inside its script, and compare-and-swap compares and writes in
one script (no WATCH round trips).

Faults: every call waits at most its timeout (the backend timeout, or less when the run's deadline is nearer): a
Redis that is down fails at once (connection refused), one that hangs fails when the timeout passes, each with
`other` naming the store. Nothing is retried (an `increment` whose reply was lost may have been applied); the pool
checks each connection before reuse and reconnects, so a Redis that was restarted serves the next call again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llmhost.domain.errors import StoreFailure
from llmhost.domain.limits import KV_BACKEND_TIMEOUT_S
from llmhost.domain.redaction import describe_key, redact_url, scrub, url_secrets
from llmhost.grants.keyvalue.base import KeyFailure, StoreLimits, growth_error, not_a_counter

T = TypeVar("T")

# Writes `pairs` (ARGV[5..]) if the guard holds, within the quotas: ARGV = max-keys, max-store-bytes (-1: none),
# guard ("-": none; "0": the single key must be unset; "1": it must hold ARGV[4]), expected value, k1, v1, k2, v2...
# Checks first, then writes: a refused write changes nothing. Returns {"ok"}, {"changed", present, current}, or
# for a quota {"keys", count, new keys} or {"bytes", total, bytes added}.
_WRITE = """
local data, index, bytes = KEYS[1], KEYS[2], KEYS[3]
local max_keys, max_bytes, guard = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if guard ~= '-' then
  local present = redis.call('HEXISTS', data, ARGV[5]) == 1
  local current = present and redis.call('HGET', data, ARGV[5]) or ''
  if (guard == '0' and present) or (guard == '1' and (not present or current ~= ARGV[4])) then
    return {'changed', present and '1' or '0', current}
  end
end
local sizes, new_keys, added = {}, 0, 0
for i = 5, #ARGV, 2 do
  local k = ARGV[i]
  local before = sizes[k]
  if before == nil then
    before = redis.call('HEXISTS', data, k) == 1 and (#k + redis.call('HSTRLEN', data, k)) or -1
  end
  local after = #k + #ARGV[i + 1]
  if before < 0 then new_keys = new_keys + 1; before = 0 end
  added = added + after - before
  sizes[k] = after
end
local count = redis.call('HLEN', data)
if max_keys >= 0 and new_keys > 0 and count + new_keys > max_keys then
  return {'keys', tostring(count), tostring(new_keys)}
end
local total = tonumber(redis.call('GET', bytes) or '0')
if max_bytes >= 0 and added > 0 and total + added > max_bytes then
  return {'bytes', tostring(total), tostring(added)}
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', data, ARGV[i], ARGV[i + 1])
  redis.call('ZADD', index, 0, ARGV[i])
end
if added ~= 0 then redis.call('INCRBY', bytes, added) end
return {'ok'}
"""
# ARGV = keys: deletes those that are set.
_DELETE = """
local data, index, bytes = KEYS[1], KEYS[2], KEYS[3]
local freed = 0
for i = 1, #ARGV do
  local k = ARGV[i]
  if redis.call('HEXISTS', data, k) == 1 then
    freed = freed + #k + redis.call('HSTRLEN', data, k)
    redis.call('HDEL', data, k)
    redis.call('ZREM', index, k)
  end
end
if freed ~= 0 then redis.call('DECRBY', bytes, freed) end
return freed
"""
# ARGV = max-keys, max-store-bytes, key, delta. Returns {"ok", new value as text} (text: Lua numbers are doubles),
# {"nan"} (not a counter), {"overflow"}, or a quota's reply as _WRITE's.
_INCREMENT = """
local data, index, bytes = KEYS[1], KEYS[2], KEYS[3]
local max_keys, max_bytes, k = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local present = redis.call('HEXISTS', data, k) == 1
local old = present and redis.call('HGET', data, k) or nil
if present and not (old == '0' or string.match(old, '^%-?[1-9]%d*$')) then return {'nan'} end
if not present then
  local count = redis.call('HLEN', data)
  if max_keys >= 0 and count + 1 > max_keys then return {'keys', tostring(count), '1'} end
end
local result = redis.pcall('HINCRBY', data, k, ARGV[4])
if type(result) == 'table' and result.err then
  return {string.find(result.err, 'overflow') and 'overflow' or 'nan'}
end
local new = redis.call('HGET', data, k)
local added = #new - (present and #old or -#k)
local total = tonumber(redis.call('GET', bytes) or '0')
if max_bytes >= 0 and added > 0 and total + added > max_bytes then
  if present then redis.call('HSET', data, k, old) else redis.call('HDEL', data, k) end
  return {'bytes', tostring(total), tostring(added)}
end
if not present then redis.call('ZADD', index, 0, k) end
if added ~= 0 then redis.call('INCRBY', bytes, added) end
return {'ok', new}
"""


class RedisBackend:
    def __init__(self, limits: StoreLimits, url: str) -> None:
        import redis  # lazy: only hosts with a Redis store need the client

        self.limits = limits
        self.url = redact_url(url)
        # The client's own messages may echo a part of the URL (a port it cannot parse, a server's reply).
        self._secrets = url_secrets(url)
        self._errors = redis.RedisError
        self._timeouts = redis.TimeoutError
        self._connection_errors = redis.ConnectionError
        try:  # No retries (the pool's default): a retried write may apply twice. Timeouts bound every wait.
            self._pool = redis.ConnectionPool.from_url(
                url, socket_timeout=KV_BACKEND_TIMEOUT_S, socket_connect_timeout=KV_BACKEND_TIMEOUT_S
            )
        except ValueError:  # its message may quote the URL's parts
            raise self._failure("the `url` does not parse as a Redis URL") from None
        self._client = redis.Redis(connection_pool=self._pool)
        prefix = f"llmhost:kv:{{{limits.name}}}:"
        self._keys = [prefix + "data", prefix + "index", prefix + "bytes"]
        self._write = self._client.register_script(_WRITE)
        self._delete = self._client.register_script(_DELETE)
        self._increment = self._client.register_script(_INCREMENT)

    # -- calls, bounded by their timeout -------------------------------------------------------------------------
    def _call(self, what: str, call: Callable[[], T], timeout: float) -> T:
        try:
            if timeout >= KV_BACKEND_TIMEOUT_S:  # the sockets' own timeouts bound the call
                return call()
            return _within(call, timeout)
        except (_TimedOut, self._timeouts):
            raise self._failure(f"{what}: Redis did not answer within {timeout:.1f} s") from None
        except self._connection_errors as error:
            raise self._failure(f"{what}: cannot reach Redis ({error})") from None
        except self._errors as error:
            raise self._failure(f"{what}: {error}") from None

    def _failure(self, detail: str) -> StoreFailure:
        return StoreFailure(f"key-value store {self.limits.name!r} (Redis, {self.url}): {scrub(detail, self._secrets)}")

    def _quota_args(self) -> list[int]:
        return [
            -1 if self.limits.max_keys is None else self.limits.max_keys,
            -1 if self.limits.max_store_bytes is None else self.limits.max_store_bytes,
        ]

    def _script(self, what: str, script: Any, args: Sequence[Any], timeout: float) -> list[bytes]:
        reply = self._call(what, lambda: script(keys=self._keys, args=args, client=self._client), timeout)
        return list(reply) if isinstance(reply, list) else [reply]

    # -- operations ---------------------------------------------------------------------------------------------
    def get(self, key: str, timeout: float) -> bytes | None:
        value: Any = self._call("get", lambda: self._client.hget(self._keys[0], key), timeout)
        return None if value is None else bytes(value)

    def exists(self, key: str, timeout: float) -> bool:
        return bool(self._call("exists", lambda: self._client.hexists(self._keys[0], key), timeout))

    def get_many(self, keys: Sequence[str], timeout: float) -> list[bytes | None]:
        if not keys:
            return []
        values: Any = self._call("get-many", lambda: self._client.hmget(self._keys[0], list(keys)), timeout)
        return [None if value is None else bytes(value) for value in values]

    def keys_after(self, after: str | None, limit: int, timeout: float) -> list[str]:
        start = b"-" if after is None else b"(" + after.encode()
        found: Any = self._call(
            "list-keys", lambda: self._client.zrangebylex(self._keys[1], start, b"+", start=0, num=limit), timeout
        )
        return [bytes(key).decode("utf-8") for key in found]

    def set_many(self, pairs: Sequence[tuple[str, bytes]], timeout: float) -> None:
        args: list[Any] = [*self._quota_args(), "-", b""]
        for key, value in pairs:
            args += [key, value]
        reply = self._script("set", self._write, args, timeout)
        if reply[0] != b"ok":
            raise self._refused(reply)

    def _refused(self, reply: list[bytes]) -> StoreFailure:
        """The error for a write the script refused: a quota's (the message SQLite's check builds), from the counts
        the script sent back."""
        error = None
        if reply[0] == b"keys":
            error = growth_error(self.limits, int(reply[1]), 0, int(reply[2]), 0)
        elif reply[0] == b"bytes":
            error = growth_error(self.limits, 0, int(reply[1]), 0, int(reply[2]))
        return error or self._failure(f"unexpected reply from Redis: {reply!r}")

    def delete_many(self, keys: Sequence[str], timeout: float) -> None:
        if keys:
            self._script("delete", self._delete, list(keys), timeout)

    def increment(self, key: str, delta: int, timeout: float) -> int:
        reply = self._script("increment", self._increment, [*self._quota_args(), key, delta], timeout)
        if reply[0] == b"ok":
            return int(reply[1])
        if reply[0] == b"nan":
            raise not_a_counter(key)
        if reply[0] == b"overflow":
            raise KeyFailure(f"increment: {describe_key(key)} would overflow a signed 64-bit integer (+ {delta})", key)
        raise self._refused(reply)

    def swap(self, key: str, expected: bytes | None, value: bytes, timeout: float) -> tuple[bool, bytes | None]:
        guard = ["0", b""] if expected is None else ["1", expected]
        reply = self._script("swap", self._write, [*self._quota_args(), *guard, key, value], timeout)
        if reply[0] == b"ok":
            return True, None
        if reply[0] == b"changed":
            return False, bytes(reply[2]) if reply[1] == b"1" else None
        raise self._refused(reply)

    def close(self) -> None:
        self._pool.disconnect()


class _TimedOut(Exception):
    pass


def _within(call: Callable[[], T], timeout: float) -> T:
    """`call()`, waited for at most `timeout` s: a deadline nearer than the sockets' timeout. The call goes on, on a
    daemon thread of its own (never delaying the process's exit), until its socket timeout drops its connection."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # handed to the waiting thread
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name="kv-redis-call", daemon=True).start()
    if not done.wait(max(timeout, 0.0)):
        raise _TimedOut
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value
