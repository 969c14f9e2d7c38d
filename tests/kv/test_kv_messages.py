"""What key-value errors show, and where SQLite stores live (issue 54), on the real backends: SQLite files in the
test's directory and real redis-servers.

Keys are quoted by a short prefix and their length, Redis URLs without their credentials (however the password is
spelled), and two store names never share a file."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmhost.config import KeyValueStoreConfig
from llmhost.domain.errors import StoreFailure
from llmhost.domain.limits import MAX_KV_KEY_BYTES
from llmhost.grants.keyvalue.base import encode_cursor
from llmhost.grants.keyvalue.stores import KeyValueStores, Store
from redis_server import RedisServer, free_port

from .conftest import BACKENDS

SECRET_KEY = "sk_live_Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"
PASSWORD = "p@ss:w/rd?#1-right"  # every character a URL gives a meaning to


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _failure(call: Callable[[], object]) -> str:
    with pytest.raises(StoreFailure) as failure:
        call()
    return failure.value.message


def test_messages_quote_keys_by_a_short_prefix_and_their_length(make_store: Callable[..., Store], backend: str) -> None:
    store = make_store(backend)
    long_key = SECRET_KEY * (MAX_KV_KEY_BYTES // len(SECRET_KEY) + 1)
    messages = {
        "NUL": _failure(lambda: store.set(SECRET_KEY + "\0", b"v")),
        "too long": _failure(lambda: store.get(long_key)),
        "cursor": _failure(lambda: store.list_keys(encode_cursor("another-store", SECRET_KEY))),
    }
    store.set(SECRET_KEY, b"not a number")
    messages["not a counter"] = _failure(lambda: store.increment(SECRET_KEY, 1))
    store.set(SECRET_KEY, str(2**63 - 1).encode())
    messages["overflow"] = _failure(lambda: store.increment(SECRET_KEY, 1))
    for what, message in messages.items():
        assert "…' (" in message, (what, message)
        assert SECRET_KEY[8:14] not in message, (what, message)
    assert f"'sk_live_…' ({len(SECRET_KEY) + 1} characters)" in messages["NUL"]
    assert f"'sk_live_…' ({len(long_key)} characters)" in messages["too long"]
    assert f"'sk_live_…' ({len(SECRET_KEY)} characters)" in messages["overflow"]
    assert "the cursor 'kv1.c2tf…'" in messages["cursor"]  # a cursor holds its key, base64-encoded


# -- Redis URLs ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of its own that requires PASSWORD."""
    server = RedisServer(tmp_path_factory.mktemp("redis-locked")).start()
    command = [b"CONFIG", b"SET", b"requirepass", PASSWORD.encode()]  # RESP: no client library involved
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in command))
        assert sock.recv(16).startswith(b"+OK")
    yield server
    server.stop()


def _stores(tmp_path: Path, url: str) -> KeyValueStores:
    # model_construct: URLs the config refuses can still reach the backend through the Python API.
    return KeyValueStores({"shared": KeyValueStoreConfig.model_construct(backend="redis", url=url)}, tmp_path)


def _error_of(tmp_path: Path, url: str) -> str:
    """The message of a `get` from store `shared` at `url` (opening it included)."""
    stores = _stores(tmp_path, url)
    try:
        return _failure(lambda: stores.open("shared").get("k"))
    finally:
        stores.close()


def test_the_right_password_in_any_spelling_opens_the_store(tmp_path: Path, locked_redis: RedisServer) -> None:
    encoded = "p%40ss%3Aw%2Frd%3F%231-right"
    for url in (
        f"redis://:{encoded}@127.0.0.1:{locked_redis.port}/0",
        f"redis://default:{encoded}@127.0.0.1:{locked_redis.port}/0",
        f"redis://127.0.0.1:{locked_redis.port}/0?password={encoded}",
    ):
        stores = _stores(tmp_path, url)
        try:
            stores.open("shared").set("k", b"v")
            assert stores.open("shared").get("k") == b"v"
        finally:
            stores.close()


@pytest.mark.parametrize(
    ("template", "secrets", "shown"),
    [
        ("redis://:Wr@ng-pa55@127.0.0.1:{port}/0", ["Wr@ng", "ng-pa55"], "redis://***@127.0.0.1:{port}/0"),
        ("redis://:Wr%40ng:pa55@127.0.0.1:{port}/0", ["Wr%40ng", "Wr@ng", "pa55"], "redis://***@127.0.0.1:{port}/0"),
        ("redis://admin:Wr0ng-pa55@127.0.0.1:{port}/0", ["Wr0ng-pa55"], "redis://***@127.0.0.1:{port}/0"),
        ("redis://127.0.0.1:{port}/0?password=Wr0ng-pa55", ["Wr0ng-pa55"], "redis://127.0.0.1:{port}/0?***"),
        # The old redaction's blind spots: a password after `@`, in the query, with `/` in it.
        ("redis://:p@ss:w/rd?#1-right@127.0.0.1:{port}/0", ["ss:w", "rd?", "1-right"], "redis://***"),
    ],
)
def test_a_refused_password_is_never_shown(
    tmp_path: Path, locked_redis: RedisServer, template: str, secrets: list[str], shown: str
) -> None:
    message = _error_of(tmp_path, template.format(port=locked_redis.port))
    assert f"key-value store 'shared' (Redis, {shown.format(port=locked_redis.port)})" in message
    for secret in secrets:
        assert secret not in message, message


@pytest.mark.parametrize(
    ("template", "secret"),
    [
        ("rediss://:tls-s3cret@127.0.0.1:{port}/0", "tls-s3cret"),
        ("redis://127.0.0.1:{port}/0?password=q-s3cret", "q-s3cret"),
        ("unix://:unix-s3cret@/nonexistent/redis.sock", "unix-s3cret"),
        ("redis://:pa55/w0rd@127.0.0.1:{port}/0", "pa55"),  # the client would quote "pa55" as a bad port
    ],
)
def test_an_unreachable_or_unparsable_redis_never_shows_the_password(
    tmp_path: Path, template: str, secret: str
) -> None:
    message = _error_of(tmp_path, template.format(port=free_port()))  # nothing listens there: refused at once
    assert message.startswith("key-value store 'shared' (Redis, ") and secret not in message


# -- SQLite files --------------------------------------------------------------------------------------------------


def test_names_that_shared_a_file_now_each_have_their_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    names = ("x/y", "store-bd3c9047d6816c31", "cache")  # the first two were both store-bd3c9047d6816c31.db
    configs = {name: KeyValueStoreConfig() for name in names}
    stores = KeyValueStores(configs, data)
    try:
        for name in names:
            stores.open(name).set("owner", name.encode())
            stores.open(name).increment("writes", 1)
        assert [stores.open(name).get("owner") for name in names] == [name.encode() for name in names]
        assert [stores.open(name).increment("writes", 0) for name in names] == [1, 1, 1]
        paths = {name: stores.default_path(name) for name in names}
    finally:
        stores.close()
    assert len(set(paths.values())) == len(names)
    # Plain names, and names digested before, keep their files: their data is where it was.
    assert paths["cache"] == data / "kv" / "cache.db"
    assert paths["x/y"] == data / "kv" / "store-bd3c9047d6816c31.db"
    for name, path in paths.items():
        with sqlite3.connect(path) as connection:  # each file holds its own store's keys only
            rows = connection.execute("SELECT key, value FROM kv ORDER BY key").fetchall()
        assert rows == [("owner", name.encode()), ("writes", b"1")]
    reopened = KeyValueStores(configs, data)
    try:
        assert [reopened.open(name).get("owner") for name in names] == [name.encode() for name in names]
    finally:
        reopened.close()


def test_a_key_holding_a_secret_is_not_quoted_even_in_part() -> None:
    """Issue 66: a key is quoted by its first 8 characters, which may be part of a `{ env = ... }` secret used in
    it. Scrubbed for the component, the quote is masked whole (the secret itself never appears whole, so scrubbing
    the text alone missed it)."""
    from llmhost.config import EnvValue, GrantsConfig
    from llmhost.grants.grants import Grants
    from llmhost.grants.keyvalue.base import add_checked, check_key, decode_cursor, not_a_counter

    secret = "tok3n-Zq9xWv7Lm2"
    grants = Grants.from_config(
        GrantsConfig(config={"token": EnvValue(env="KV_SECRET")}), "sandbox", {"KV_SECRET": secret}
    )
    key = "u:" + secret  # its shown prefix, 'u:tok3n-…', holds six characters of the secret
    failures: list[StoreFailure] = [not_a_counter(key)]
    for call in (
        lambda: check_key(key + "\0"),
        lambda: check_key(key * (MAX_KV_KEY_BYTES // len(key) + 1)),
        lambda: add_checked(key, 2**63 - 1, 1),
        lambda: decode_cursor("store", encode_cursor("another-store", key)),
    ):
        with pytest.raises(StoreFailure) as failure:
            call()
        failures.append(failure.value)
    for failure in failures:
        message = failure.scrubbed(grants.scrub).message
        assert secret[:4] not in message and "***" in message, message
        assert failure.kind == "other"
    plain = not_a_counter("user:12345678")  # no secret in it: quoted as before
    assert plain.scrubbed(grants.scrub).message == plain.message
