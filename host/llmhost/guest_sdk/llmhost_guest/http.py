"""Outbound HTTP from a guest, through the host's `outbound-http` interface (only to the hosts the operator granted
in `allowed-outbound-hosts`).

    from llmhost_guest import http

    reply = http.get("https://api.example.com/weather?city=Paris", timeout_s=5)
    if reply.status == 200:
        print(reply.json()["temperature"])
    try:
        http.post("https://api.example.com/log", body={"event": "start"})
    except http.HttpError as error:
        print(error.kind, error.message)   # "denied", "invalid-request", "timeout", "too-large", "connection"

A 4xx or 5xx status is a `Response`, not an error. The host follows redirects (to granted hosts only) and returns
the last response, its body whole (at most the grant's `max-response-bytes`).

Responses of any size for `http-app` guests (wit/http.wit): `respond` returns a small body in the `response`
record and sends a large one through the response writer, in pieces.

    from llmhost_guest import http as web

    def handle(self, request, writer):
        return web.respond(writer, 200, [("content-type", "application/json")], big_json_bytes)

Why: wasmtime copies at most `MAX_CALL_ITEMS` list elements (bytes, here) from a guest to the host in one call,
so a `response.body` or a `write` chunk over ~2.6 MiB traps the guest. The writer takes the body in
`WRITE_BYTES` pieces instead; the limit is then the guest's memory and its deadline (a 64 MiB body is tested).
"""

from __future__ import annotations

import json as _json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .params import MAX_CALL_ITEMS

__all__ = [
    "INLINE_BYTES",
    "KINDS",
    "MAX_BODY_BYTES",
    "MAX_CALL_ITEMS",
    "WRITE_BYTES",
    "HttpError",
    "Response",
    "get",
    "post",
    "request",
    "respond",
    "write_all",
]

# The largest body one request can carry: the host cannot take more out of a guest in one call (it mirrors the
# host's MAX_OUTBOUND_BODY_BYTES), so a larger one is refused here, before the call, instead of trapping the guest.
MAX_BODY_BYTES = 2 * 1024 * 1024
KINDS = ("denied", "invalid-request", "timeout", "too-large", "connection")
_MAX_TIMEOUT_MS = 2**32 - 1


class HttpError(Exception):
    """A request that got no response. `kind`: one of `KINDS`; `message`: the host's explanation."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Response:
    """`status`; `headers`: lower-case name -> value (a repeated field's values joined by ", "; every field in
    order in `header_list`); `body`: the bytes as the server sent them."""

    status: int
    header_list: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        joined: dict[str, str] = {}
        for name, value in self.header_list:
            joined[name] = f"{joined[name]}, {value}" if name in joined else value
        return joined

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self, encoding: str | None = None) -> str:
        """The body as text: in `encoding`, else the content-type's charset, else UTF-8 (bad bytes replaced)."""
        return self.body.decode(encoding or self._charset() or "utf-8", "replace")

    def json(self) -> Any:
        return _json.loads(self.body)

    def _charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
                try:
                    "".encode(charset)
                except LookupError:
                    return None
                return charset
        return None


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    body: bytes | str | dict[str, Any] | list[Any] | None = None,
    timeout_s: float | None = None,
) -> Response:
    """Send one request and wait for the whole response. `body`: bytes, text (sent as UTF-8), or a dict or list
    (sent as JSON, with `content-type: application/json` unless `headers` sets one). `timeout_s`: the longest wait
    (the host never waits past the run's deadline anyway). Raises `HttpError`."""
    fields = _fields(headers)
    payload = _body(body, fields)
    wit_request = _wit().Request(
        method=_text(method, "the method"),
        url=_text(url, "the URL"),
        headers=fields,
        body=payload,
        timeout_ms=_timeout_ms(timeout_s),
    )
    from componentize_py_types import Err

    wit = _wit()
    streamed = getattr(wit, "send_streamed", None)  # 0.2.4; a guest built against 0.2.3 has `send` only
    try:
        if streamed is None:
            reply = wit.send(wit_request)
            return Response(int(reply.status), _headers(reply.headers), bytes(reply.body))
        reply = streamed(wit_request)
        with reply.body as incoming:
            return Response(int(reply.status), _headers(reply.headers), _read_all(incoming))
    except Err as failure:
        raise _error(failure.value) from None


# The body comes over in chunks of this size: handing bytes into a guest costs the host ~80 bytes a byte while it
# does, so a large body costs one chunk's worth at a time (the host's `transfer-memory-mb` budget bounds the rest).
READ_CHUNK_BYTES = 1024 * 1024


def _read_all(incoming: Any) -> bytes:
    parts: list[bytes] = []
    while True:
        chunk = incoming.read(READ_CHUNK_BYTES)
        if not chunk:
            return b"".join(parts)
        parts.append(bytes(chunk))


def _headers(fields: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(n), str(v)) for n, v in fields)


def get(url: str, **kw: Any) -> Response:
    return request("GET", url, **kw)


def post(url: str, **kw: Any) -> Response:
    return request("POST", url, **kw)


def _wit() -> Any:
    from wit_world.imports import outbound_http

    return outbound_http


def _error(value: Any) -> HttpError:
    """The generated bindings name the cases `Error_Denied`, `Error_InvalidRequest`...: mapped by name."""
    name = type(value).__name__.removeprefix("Error_")
    kind = "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")
    return HttpError(kind if kind in KINDS else "connection", str(getattr(value, "value", "") or ""))


def _text(value: Any, what: str) -> str:
    """A string the host can be given: text that encodes to UTF-8 (a lone surrogate cannot cross into the host, and
    would trap the guest)."""
    if not isinstance(value, str):
        raise HttpError("invalid-request", f"{what} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise HttpError("invalid-request", f"{what} {value!r} is not valid text (a lone surrogate)") from None
    return value


def _fields(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    fields = []
    for pair in pairs:
        try:
            name, value = pair
        except (TypeError, ValueError):
            raise HttpError("invalid-request", f"headers must be (name, value) pairs, not {pair!r}") from None
        fields.append((_text(name, "a header name"), _text(value, f"the value of header {name!r}")))
    return fields


def _body(body: bytes | str | dict[str, Any] | list[Any] | None, fields: list[tuple[str, str]]) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, (dict, list)):
        if not any(name.lower() == "content-type" for name, _ in fields):
            fields.append(("content-type", "application/json"))
        payload = _json.dumps(body).encode()
    elif isinstance(body, str):
        payload = _text(body, "the body").encode()
    elif isinstance(body, (bytes, bytearray, memoryview)):
        payload = bytes(body)
    else:
        raise HttpError("invalid-request", f"the body must be bytes, str, a dict or a list, not {type(body).__name__}")
    if len(payload) > MAX_BODY_BYTES:
        raise HttpError(
            "invalid-request",
            f"the body is {len(payload)} bytes, over the {MAX_BODY_BYTES} bytes one request can carry; not sent",
        )
    return payload


def _timeout_ms(timeout_s: float | None) -> int | None:
    if timeout_s is None:
        return None
    if not isinstance(timeout_s, (int, float)) or timeout_s != timeout_s or timeout_s < 0:
        raise HttpError("invalid-request", f"timeout_s must be a number of seconds >= 0, not {timeout_s!r}")
    return min(_MAX_TIMEOUT_MS, round(timeout_s * 1000))


# -- responses of any size for `http-app` guests (wit/http.wit) --------------------------------------------------

WRITE_BYTES = 1024 * 1024  # one `write` chunk
INLINE_BYTES = WRITE_BYTES  # a body up to this size goes in the `response` record itself


def _wit_http() -> Any:
    from wit_world.imports import http

    return http


def respond(writer: Any, status: int, headers: Iterable[tuple[str, str]], body: bytes | bytearray | memoryview) -> Any:
    """The `response` for `handler.handle` to return: `body` in it when it is at most `INLINE_BYTES`; otherwise
    `start(status, headers)` and the body through `write`, in pieces (`write_all`), and an empty response (the host
    ignores a streamed response's record but its body). Raises the writer's `Err(write-error)` as `write` does
    (e.g. the client left)."""
    wit = _wit_http()
    fields = list(headers)
    if len(body) <= INLINE_BYTES:
        return wit.Response(status=status, headers=fields, body=bytes(body))
    writer.start(status, fields)
    write_all(writer, body)
    return wit.Response(status=status, headers=fields, body=b"")


def write_all(writer: Any, data: bytes | bytearray | memoryview) -> None:
    """`writer.write(data)` in pieces of at most `WRITE_BYTES` (after `start`)."""
    view = memoryview(data).cast("B")
    for offset in range(0, len(view), WRITE_BYTES):
        writer.write(bytes(view[offset : offset + WRITE_BYTES]))
