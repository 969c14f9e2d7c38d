"""The guest SDK's `http` and `config` modules without wasm: the generated bindings (`wit_world.imports.outbound_http`,
`wasi_config_store`, `componentize_py_types`) are faked with stand-ins shaped like componentize-py's output. Through
real guests: tests/integration/test_outbound_guests.py."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from llmhost.toolchains.python import guest_sdk_dir


class Err(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class Request:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes | None
    timeout_ms: int | None


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Error_TooLarge:  # noqa: N801 (the generated bindings' names)
    value: str


@dataclass
class Error_InvalidRequest:  # noqa: N801
    value: str


@dataclass
class Error_Io:  # noqa: N801
    value: str


class FakeOutbound:
    Request = Request

    def __init__(self) -> None:
        self.sent: list[Request] = []
        self.reply: Any = Response(200, [("content-type", "text/plain; charset=latin-1"), ("set-cookie", "a"),
                                         ("set-cookie", "b")], "café".encode("latin-1"))  # fmt: skip

    def send(self, request: Request) -> Response:
        self.sent.append(request)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply  # type: ignore[no-any-return]


class FakeConfig:
    def __init__(self) -> None:
        self.values = {"A": "1", "B": "2"}
        self.fail = False

    def get(self, key: str) -> str | None:
        if self.fail:
            raise Err(Error_Io("disk"))
        return self.values.get(key)

    def get_all(self) -> list[tuple[str, str]]:
        return list(self.values.items())


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, FakeOutbound, FakeConfig]]:
    outbound, config = FakeOutbound(), FakeConfig()
    world = types.ModuleType("wit_world")
    imports = types.ModuleType("wit_world.imports")
    imports.outbound_http = outbound  # type: ignore[attr-defined]
    imports.wasi_config_store = config  # type: ignore[attr-defined]
    world.imports = imports  # type: ignore[attr-defined]
    cpt = types.ModuleType("componentize_py_types")
    cpt.Err = Err  # type: ignore[attr-defined]
    for name, module in {"wit_world": world, "wit_world.imports": imports, "componentize_py_types": cpt}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.syspath_prepend(str(guest_sdk_dir()))
    for name in [m for m in sys.modules if m.startswith("llmhost_guest")]:
        monkeypatch.delitem(sys.modules, name)
    import llmhost_guest

    yield llmhost_guest, outbound, config


def test_a_request_becomes_the_wit_record(sdk: tuple[Any, FakeOutbound, FakeConfig]) -> None:
    guest, outbound, _ = sdk
    reply = guest.http.post("https://a.example/x", body={"k": [1]}, headers={"x-a": "1"}, timeout_s=2.5)
    headers = [("x-a", "1"), ("content-type", "application/json")]
    assert outbound.sent == [Request("POST", "https://a.example/x", headers, b'{"k": [1]}', 2500)]
    assert reply.status == 200 and reply.ok
    assert reply.headers == {"content-type": "text/plain; charset=latin-1", "set-cookie": "a, b"}
    assert reply.text() == "café"  # the content-type's charset
    guest.http.get("https://a.example/", headers=[("x-b", "2")], body="é")
    assert outbound.sent[-1] == Request("GET", "https://a.example/", [("x-b", "2")], "é".encode(), None)


def test_json_and_a_content_type_of_its_own(sdk: tuple[Any, FakeOutbound, FakeConfig]) -> None:
    guest, outbound, _ = sdk
    outbound.reply = Response(404, [], b'{"error": "nope"}')
    reply = guest.http.request("PUT", "https://a.example/", body=[1], headers={"Content-Type": "text/x"})
    assert outbound.sent[-1].headers == [("Content-Type", "text/x")]
    assert (reply.status, reply.ok, reply.json()) == (404, False, {"error": "nope"})  # a status, not an error


def test_host_errors_become_http_errors_with_their_kind(sdk: tuple[Any, FakeOutbound, FakeConfig]) -> None:
    guest, outbound, _ = sdk
    outbound.reply = Err(Error_TooLarge("the response is larger than 10 bytes"))
    with pytest.raises(guest.http.HttpError) as caught:
        guest.http.get("https://a.example/")
    assert (caught.value.kind, caught.value.message) == ("too-large", "the response is larger than 10 bytes")
    outbound.reply = Err(Error_InvalidRequest("bad"))
    with pytest.raises(guest.http.HttpError, match="invalid-request: bad"):
        guest.http.get("https://a.example/")


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.get("https://a.example/\ud800"),
        lambda h: h.get("https://a.example/", headers={"x": "\udc00"}),
        lambda h: h.get("https://a.example/", headers={"\ud800": "x"}),
        lambda h: h.request("G\ud800T", "https://a.example/"),
        lambda h: h.post("https://a.example/", body="\ud800"),
        lambda h: h.post("https://a.example/", body=b"x" * (2 * 1024 * 1024 + 1)),
        lambda h: h.post("https://a.example/", body=42),
        lambda h: h.get("https://a.example/", timeout_s=-1),
        lambda h: h.get("https://a.example/", timeout_s=float("nan")),
        lambda h: h.get("https://a.example/", headers=["x-a"]),
        lambda h: h.get(b"https://a.example/"),
    ],
)
def test_what_the_host_cannot_take_is_refused_before_the_call(
    sdk: tuple[Any, FakeOutbound, FakeConfig], call: Any
) -> None:
    guest, outbound, _ = sdk
    with pytest.raises(guest.http.HttpError) as caught:
        call(guest.http)
    assert caught.value.kind == "invalid-request"
    assert outbound.sent == []


def test_the_largest_body_and_timeout_pass(sdk: tuple[Any, FakeOutbound, FakeConfig]) -> None:
    guest, outbound, _ = sdk
    guest.http.post("https://a.example/", body=b"x" * guest.http.MAX_BODY_BYTES, timeout_s=10**9)
    assert len(outbound.sent[-1].body or b"") == 2 * 1024 * 1024 and outbound.sent[-1].timeout_ms == 2**32 - 1


def test_config(sdk: tuple[Any, FakeOutbound, FakeConfig]) -> None:
    guest, _, config = sdk
    assert (guest.config.get("A"), guest.config.get("Z"), guest.config.get("\ud800")) == ("1", None, None)
    assert guest.config.get_all() == {"A": "1", "B": "2"}
    config.fail = True
    with pytest.raises(guest.config.ConfigError) as caught:
        guest.config.get("A")
    assert (caught.value.kind, caught.value.message) == ("io", "disk")
