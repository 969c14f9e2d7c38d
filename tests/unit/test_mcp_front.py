"""The pure parts of MCP's hardening and of the shared HTTP front: which stdio lines the SDK cannot take and how
each is answered, values cut short in messages, refusals in JSON-RPC's shape, the front's body limit and
disconnect notice (driven as plain ASGI), and descriptors planned for a second listener."""

from __future__ import annotations

import json
import resource
from typing import Any

import anyio
import pytest

from llmhost.domain.limits import FD_RESERVE, FDS_PER_REQUEST
from llmhost.mcp.http import jsonrpc_refusal
from llmhost.mcp.stdio import BATCH, INVALID_REQUEST, NOT_A_MESSAGE, NOT_UNICODE, PARSE_ERROR, line_problem
from llmhost.mcp.tools import clip
from llmhost.shell.front import BODY_BYTES, CLIENT_GONE, Front, Guarded, plan_descriptors


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"jsonrpc": "2.0", "id": 1, "method": "ping"}', None),
        ('{"jsonrpc": "2.0", "method": "notifications/initialized"}', None),
        ("garbage", (PARSE_ERROR, None)),
        ('[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', (INVALID_REQUEST, None)),
        ('{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "\\ud800"}}', (PARSE_ERROR, 7)),
        ('{"jsonrpc": "2.0", "id": "a", "method": 5}', (INVALID_REQUEST, "a")),
        ('{"jsonrpc": "2.0", "id": true, "method": 5}', (INVALID_REQUEST, None)),  # not an id: a bool
    ],
)
def test_lines_the_sdk_cannot_take_are_told_apart(line: str, expected: tuple[int, Any] | None) -> None:
    problem = line_problem(line)
    if expected is None:
        assert problem is None
        return
    assert problem is not None and (problem[0], problem[2]) == expected


def test_each_refused_line_says_why() -> None:
    assert line_problem("[]") == (INVALID_REQUEST, BATCH, None)
    assert line_problem('{"id": 3}') == (INVALID_REQUEST, NOT_A_MESSAGE, 3)
    assert line_problem('{"jsonrpc": "2.0", "id": 2, "method": "\\udc00"}') == (PARSE_ERROR, NOT_UNICODE, 2)
    code, message, _ = line_problem("x" * 100_000) or (0, "", None)
    assert code == PARSE_ERROR and len(message) < 400


def test_clip_keeps_short_texts_and_says_how_long_a_cut_one_was() -> None:
    assert clip("short") == "short"
    cut = clip("y" * 3_000_000, 300)
    assert cut.startswith("y" * 300) and cut.endswith("… (3000000 characters in all)") and len(cut) < 340


def test_refusals_are_jsonrpc_errors() -> None:
    kind, body = jsonrpc_refusal(413, "too large")
    assert kind == b"application/json"
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "too large"}}


def _drive(app: Any, messages: list[dict[str, Any]], headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """Run one request through an ASGI app; its receive hands out `messages`, then waits forever."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            if queue:
                return queue.pop(0)
            await anyio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "client": ("127.0.0.1", 1)}
        with anyio.fail_after(5):
            await app(scope, receive, send)

    anyio.run(main)
    return sent


def test_the_front_refuses_a_body_over_the_limit_before_the_app_sees_it() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    guarded = Guarded(app, Front(max_body_bytes=10, max_body_key="`limits.max-body-bytes` in x.toml"))
    sent = _drive(guarded, [{"type": "http.request", "body": b"x" * 11, "more_body": False}], [])
    assert not seen and sent[0]["status"] == 413
    assert b"over the limit of 10 bytes (`limits.max-body-bytes` in x.toml)" in sent[1]["body"]
    sent = _drive(guarded, [], [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")])
    assert not seen and sent[0]["status"] == 400 and (b"connection", b"close") in sent[0]["headers"]


def test_the_app_gets_the_body_whole_and_is_told_when_the_client_goes() -> None:
    got: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got["size"] = scope[BODY_BYTES]
        got["body"] = await receive()
        await scope[CLIENT_GONE].wait()  # set by the disconnect the front reads
        got["after"] = await receive()

    messages = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"c", "more_body": False},
        {"type": "http.disconnect"},
    ]
    _drive(Guarded(app, Front()), messages, [])
    assert got["size"] == 3 and got["body"]["body"] == b"abc" and not got["body"]["more_body"]
    assert got["after"] == {"type": "http.disconnect"}


def test_a_second_listener_s_connections_are_kept_in_the_descriptor_plan() -> None:
    concurrency, soft = 4, 1024
    reserve = FD_RESERVE + FDS_PER_REQUEST * concurrency
    assert plan_descriptors(256, concurrency, soft, soft, other_connections=256) == (soft, 256)
    assert plan_descriptors(900, concurrency, soft, soft, other_connections=100) == (soft, soft - reserve - 100)
    assert plan_descriptors(900, concurrency, soft, resource.RLIM_INFINITY, 100) == (900 + reserve + 100, 900)
