"""Grants and stores as config load resolves them (issue 54): config values from the environment that are not
UTF-8, the values to scrub from messages, store names that would share a file, Redis URLs whose credentials cannot
be told apart, and outbound grants that reach a Redis store."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmhost import Host, HostConfig
from llmhost.api import HostError
from llmhost.config import ConfigError, EnvValue, KeyValueStoreConfig, SandboxConfig, load_config
from llmhost.domain.errors import LlmError, OutboundDenied, StoreFailure
from llmhost.domain.stores import store_file_name
from llmhost.grants import Grants, resolve_config_values
from llmhost.shell.config import load_app_config, resolve

SECRET = "s3cr3t-Value-0f-the-env"

# -- config values from the environment ----------------------------------------------------------------------------


def test_an_env_value_that_is_not_utf8_is_refused_naming_key_and_variable() -> None:
    environ = {"API_TOKEN": "s3cr3t\udcffrest", "OTHER": "fine"}
    with pytest.raises(ConfigError) as failure:
        resolve_config_values(
            {"A": EnvValue(env="OTHER"), "TOKEN": EnvValue(env="API_TOKEN")}, "sandbox.config", environ
        )
    message = str(failure.value)
    assert "`sandbox.config.TOKEN`" in message and "API_TOKEN" in message and "not valid UTF-8" in message
    assert "s3cr3t" not in message and "rest" not in message
    message.encode("utf-8")  # printable as it is


def test_a_literal_value_or_name_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"`sandbox.config.A` is not valid UTF-8") as failure:
        resolve_config_values({"A": "pre\udcfffix"}, "sandbox.config", {})
    assert "pre" not in str(failure.value)
    with pytest.raises(ConfigError, match="the name 'B\\\\udcff' is not valid UTF-8"):
        resolve_config_values({"B\udcff": "x"}, "sandbox.config", {})


def test_non_utf8_bytes_in_the_real_environment_are_refused_at_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # os.environ shows bytes that are not UTF-8 as lone surrogates (surrogateescape): b"\xff" is "\udcff".
    monkeypatch.setitem(os.environb, b"LLMHOST_TEST_NOT_UTF8", b"s3cr3t\xffrest")
    assert os.environ["LLMHOST_TEST_NOT_UTF8"] == "s3cr3t\udcffrest"
    sandbox = SandboxConfig(config={"TOKEN": EnvValue(env="LLMHOST_TEST_NOT_UTF8")})
    with pytest.raises(ConfigError, match=r"`sandbox.config.TOKEN` reads the environment variable LLMHOST_TEST_NOT"):
        Grants.from_config(sandbox, "sandbox")
    host = Host(HostConfig(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data"))
    try:  # the Python API: Host.load resolves the grants before anything else
        with pytest.raises(HostError, match="not valid UTF-8") as refused:
            host.load(tmp_path / "app.wasm", config={"TOKEN": EnvValue(env="LLMHOST_TEST_NOT_UTF8")})
        assert "s3cr3t" not in str(refused.value)
    finally:
        host.close()
    # `llmhost serve`: the component's grants, when the app config is resolved
    (tmp_path / "app.wasm").write_bytes(b"")
    (tmp_path / "app.toml").write_text(
        '[components.api]\nsource = "app.wasm"\nconfig = { TOKEN = { env = "LLMHOST_TEST_NOT_UTF8" } }\n'
        '[routes]\n"/" = "api"\n'
    )
    with pytest.raises(ConfigError, match=r"app.toml: `components.api.config.TOKEN` .* not valid UTF-8") as failure:
        resolve(load_app_config(tmp_path / "app.toml"), str(tmp_path / "app.toml"))
    assert "s3cr3t" not in str(failure.value)


def test_grants_keep_the_values_from_the_environment_as_secrets() -> None:
    sandbox = SandboxConfig(
        config={"TOKEN": EnvValue(env="T"), "AGAIN": EnvValue(env="T"), "KEY": EnvValue(env="K"), "BASE": "https://x"}
    )
    grants = Grants.from_config(sandbox, "sandbox", {"T": SECRET, "K": "other-secret"})
    assert grants.secrets == (SECRET, "other-secret")  # a literal value is no secret; each value once
    assert grants.config["TOKEN"] == SECRET and grants.config["BASE"] == "https://x"
    message = f"store 'cache': cannot use key {SECRET!r}; again: {SECRET}, other-secret"
    assert grants.scrub(message) == "store 'cache': cannot use key '***'; again: ***, ***"
    assert SECRET not in repr(grants) and "other-secret" not in repr(grants)
    with pytest.raises(dataclasses.FrozenInstanceError):
        grants.secrets = ()  # type: ignore[misc]
    assert Grants().secrets == () and Grants().scrub(message) == message


@pytest.mark.parametrize("error_type", [StoreFailure, OutboundDenied, LlmError])
def test_an_error_scrubbed_keeps_its_kind_and_the_original(error_type: type[LlmError]) -> None:
    grants = Grants.from_config(SandboxConfig(config={"TOKEN": EnvValue(env="T")}), "sandbox", {"T": SECRET})
    error = error_type(f"https://api.example.com/?key={SECRET} refused")
    scrubbed = error.scrubbed(grants.scrub)
    assert type(scrubbed) is error_type and scrubbed.kind == error.kind
    assert scrubbed.message == str(scrubbed) == "https://api.example.com/?key=*** refused"
    assert SECRET in error.message  # the original is left as it was
    clean = error_type("nothing secret")
    assert clean.scrubbed(grants.scrub) is clean


# -- SQLite stores' files --------------------------------------------------------------------------------------------


def test_store_file_names_keep_existing_files_and_never_clash() -> None:
    assert store_file_name("cache") == "cache.db"  # plain names: as before
    assert store_file_name("x/y") == "store-bd3c9047d6816c31.db"  # as before: its data stays where it is
    # A plain name of the digest form used to be that same file; it is now digested too.
    assert store_file_name("store-bd3c9047d6816c31") not in ("store-bd3c9047d6816c31.db", store_file_name("x/y"))
    assert store_file_name("STORE-BD3C9047D6816C31").casefold() != store_file_name("x/y")
    assert store_file_name("store-bd3c9047d6816c3") == "store-bd3c9047d6816c3.db"  # not the form: itself


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_distinct_names_get_distinct_files(a: str, b: str) -> None:
    digest_of_a = store_file_name(a).removesuffix(".db")  # the name whose plain file a digested `a` would take
    for other in {b, digest_of_a, digest_of_a.upper()} - {a}:
        assert store_file_name(a) != store_file_name(other)
        if store_file_name(a).casefold() == store_file_name(other).casefold():
            assert a.casefold() == other.casefold()  # plain names differing in case only: refused at load


@pytest.mark.parametrize(("first", "second"), [("Cache", "cache"), ("Default", None)])
def test_names_differing_only_in_case_are_refused_at_load(tmp_path: Path, first: str, second: str | None) -> None:
    tables = "".join(f"[key-value.{name}]\n" for name in (first, second) if name is not None)
    (tmp_path / "llmhost.toml").write_text(tables)
    with pytest.raises(ConfigError) as failure:
        load_config(tmp_path / "llmhost.toml")
    other = second or "default"
    assert f"`key-value.{other}`" in str(failure.value) and f"`key-value.{first}`" in str(failure.value)
    assert str(tmp_path / "llmhost.toml") in str(failure.value)
    (tmp_path / "app.toml").write_text(tables)  # serve's app config alike
    with pytest.raises(ConfigError, match=f"`key-value.{first}`"):
        load_app_config(tmp_path / "app.toml")
    # A `path` of its own lifts the clash.
    (tmp_path / "llmhost.toml").write_text(f'[key-value.{first}]\npath = "own.db"\n' + tables.split("\n", 1)[1])
    load_config(tmp_path / "llmhost.toml")


# -- Redis URLs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://:pa55/w0rd@host/0", "an `@` after the host"),
        ("redis://:pa55?w0rd@host/0", "an `@` after the host"),
        ("redis://:pa55#w0rd@host/0", "an `@` after the host"),
        ("redis://:w0rd@host:pa55/0", "does not parse"),
        ("http://:pa55w0rd@host:6379", "is not a redis://"),
    ],
)
def test_a_bad_redis_url_is_refused_without_showing_its_password(tmp_path: Path, url: str, problem: str) -> None:
    with pytest.raises(ValidationError) as failure:  # the Python API: HostConfig(key_value=...)
        HostConfig(key_value={"shared": KeyValueStoreConfig(backend="redis", url=url)})
    (tmp_path / "llmhost.toml").write_text(f'[key-value.shared]\nbackend = "redis"\nurl = "{url}"\n')
    with pytest.raises(ConfigError) as loaded:
        load_config(tmp_path / "llmhost.toml")
    for message in (str(failure.value), str(loaded.value)):
        assert problem in message and "`url`" in message
        assert "pa55" not in message and "w0rd" not in message


# -- outbound grants that reach a Redis store ----------------------------------------------------------------------

REDIS_WARNING = "reaches the Redis of `key-value.shared.url`"


def _host_config(tmp_path: Path, url: str, hosts: list[str]) -> Path:
    listed = ", ".join(f'"{host}"' for host in hosts)
    path = tmp_path / "llmhost.toml"
    path.write_text(
        f'[key-value.shared]\nbackend = "redis"\nurl = "{url}"\n\n[sandbox]\nallowed-outbound-hosts = [{listed}]\n'
    )
    return path


@pytest.mark.parametrize(
    ("url", "pattern"),
    [
        ("redis://127.0.0.1:6379/0", "http://localhost:*"),
        ("redis://:pw@127.0.0.1:6379/0", "http://127.0.0.1:*"),
        ("redis://localhost:6379/0", "*://localhost:6379"),
        ("redis://localhost/0", "https://127.0.0.1:6379"),  # the default port
        ("rediss://[::1]:6380", "http://localhost:6380"),
        ("redis://10.0.0.7:6379/0", "http://10.0.0.7:*"),
        ("redis://redis.internal:6379/0", "http://*.internal:6379"),  # a name: it may resolve to a public address
        ("redis://8.8.8.8:6379/0", "http://*:*"),  # a public address: any host
    ],
)
def test_a_grant_reaching_the_redis_is_warned_of_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, url: str, pattern: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="llmhost.config"):
        load_config(_host_config(tmp_path, url, ["https://api.example.com", pattern]))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "`sandbox.allowed-outbound-hosts` entry " + repr(pattern) in warnings[0]
    assert REDIS_WARNING in warnings[0] and "pw" not in warnings[0]


@pytest.mark.parametrize(
    ("url", "pattern"),
    [
        ("redis://127.0.0.1:6379/0", "http://localhost:8080"),  # another port
        ("redis://127.0.0.1:6379/0", "http://*:*"),  # a wildcard never reaches a loopback address
        ("redis://127.0.0.1:6379/0", "http://127.0.0.2:*"),
        ("redis://10.0.0.7:6379/0", "https://*:6379"),  # nor a private one
        ("redis://redis.internal:6379/0", "https://api.example.com:*"),
        ("unix:///run/redis.sock", "http://localhost:*"),  # no address
    ],
)
def test_a_grant_not_reaching_the_redis_is_not_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, url: str, pattern: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="llmhost.config"):
        load_config(_host_config(tmp_path, url, [pattern]))
    assert not [r for r in caplog.records if REDIS_WARNING in r.getMessage()]


def test_serve_components_reaching_the_redis_are_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "app.toml").write_text(
        '[key-value.shared]\nbackend = "redis"\nurl = "redis://127.0.0.1:6379/0"\n'
        '[components.api]\nsource = "app.wasm"\nallowed-outbound-hosts = ["http://127.0.0.1:6379"]\n'
        '[components.web]\nsource = "app.wasm"\nallowed-outbound-hosts = ["https://api.example.com"]\n'
    )
    with caplog.at_level(logging.WARNING, logger="llmhost.config"):
        load_app_config(tmp_path / "app.toml")
    warnings = [r.getMessage() for r in caplog.records if REDIS_WARNING in r.getMessage()]
    assert len(warnings) == 1 and "`components.api.allowed-outbound-hosts`" in warnings[0]
