"""The HTTP front `llmhost mcp --listen` and the metrics listener share with `llmhost serve`, and the hardening of
MCP's own surfaces, each through a real `llmhost mcp` process on the fake engine (no model): raw sockets, curl and
the official `mcp` SDK's client over Streamable HTTP, and raw JSON-RPC lines over stdio.

- `header-timeout-s`, `max-connections`, `body-timeout-s`, `limits.max-body-bytes` (a JSON-RPC error the client
  shows), Content-Length with Transfer-Encoding (400, never executed) on the MCP port; the same header timeout and
  connection cap on the metrics listener, which holds no thread per connection;
- SIGTERM drains: /readyz 503, a call in flight answered with a JSON-RPC error, the closing line, exit 0;
- an argument's bad value is echoed cut short, in the tool error and in the log;
- stdio answers a line it cannot take (garbage, a batch, a lone surrogate) with a JSON-RPC error and goes on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from serve_driver import LLMHOST, METRICS_LINE, Server, serving

pytestmark = pytest.mark.wasm
HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
MAX_CONNECTIONS = 8
MAX_BODY_BYTES = 200_000
SMALL_BODY_BYTES = 2_000
GRACE_S = 4
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 9,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _config(folder: Path, probe: Path) -> Path:
    config = folder / "mcp.toml"
    config.write_text(
        f"""
metrics-listen = "127.0.0.1:0"
header-timeout-s = {HEADER_TIMEOUT_S}
body-timeout-s = {BODY_TIMEOUT_S}
max-connections = {MAX_CONNECTIONS}
max-log-bytes = 4096
shutdown-grace-s = {GRACE_S}

[engine]
kind = "fake"

[limits]
deadline-s = 60
max-body-bytes = {MAX_BODY_BYTES}

[components.probe]
source = "{probe}"

[components.small]
source = "{probe}"
limits = {{ max-body-bytes = {SMALL_BODY_BYTES} }}
"""
    )
    return config


class McpServer:
    def __init__(self, server: Server) -> None:
        self.server = server
        match = server.wait_for_line(METRICS_LINE.pattern, 10)
        self.metrics = (match.group(1), int(match.group(2)))

    @property
    def app(self) -> tuple[str, int]:
        return self.server.host, self.server.port

    @property
    def url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}/mcp"


@pytest.fixture(scope="module")
def config(tool_wasm: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _config(tmp_path_factory.mktemp("front"), tool_wasm["mcp_probe"])


@pytest.fixture(scope="module")
def mcp(config: Path, llmhost_cache_dir: Path) -> Iterator[McpServer]:
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        yield McpServer(server)


def raw(address: tuple[str, int], data: bytes, timeout: float = 10) -> bytes:
    """Send `data` and read until the server closes the connection (or `timeout` passes: then `<timeout>` ends it)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            chunks.append(b"<timeout>")
        return b"".join(chunks)


def post(mcp: McpServer, body: bytes, extra: bytes = b"") -> bytes:
    """A raw POST to /mcp as an MCP client sends it (the SDK checks `Host` against DNS rebinding)."""
    host = b"%s:%d" % (mcp.app[0].encode(), mcp.app[1])
    head = b"POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % host
    return head + b"Accept: application/json, text/event-stream\r\n" + extra + b"\r\n" + body


def session_call(url: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One tools/call through the SDK's client; the result, or the MCPError it raised."""

    async def call() -> Any:
        async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            try:
                return await session.call_tool(tool, arguments)
            except MCPError as error:
                return error

    return anyio.run(call)


def closed_within(address: tuple[str, int], head: bytes, seconds: float) -> float:
    """Send part of a request's head and return how long the server took to close the connection."""
    with socket.create_connection(address, timeout=seconds + 5) as sock:
        sock.sendall(head)
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed, without an answer (a timeout here fails the test)
        return time.monotonic() - started


def test_a_half_sent_head_is_closed_after_the_header_timeout(mcp: McpServer) -> None:
    head = b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Slow: a"
    assert closed_within(mcp.app, head, HEADER_TIMEOUT_S) < HEADER_TIMEOUT_S + 3
    assert closed_within(mcp.metrics, head, HEADER_TIMEOUT_S) < HEADER_TIMEOUT_S + 3


@pytest.mark.parametrize("port", ["app", "metrics"])
def test_connections_over_max_connections_get_503(mcp: McpServer, port: str) -> None:
    address = mcp.app if port == "app" else mcp.metrics
    idle = [socket.create_connection(address, timeout=5) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # accepted
        answer = raw(address, HEALTHZ, timeout=5)
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    answer = raw(address, HEALTHZ, timeout=5)
    assert not answer.startswith(b"HTTP/1.1 503 "), answer[:200]


def test_a_body_over_the_limit_is_a_jsonrpc_error_the_client_shows(mcp: McpServer) -> None:
    error = session_call(mcp.url, "probe_extra_echo", {"text": "y" * 10_000_000})  # 10 MB, still being sent
    assert isinstance(error, MCPError), error
    assert f"over the limit of {MAX_BODY_BYTES} bytes (`limits.max-body-bytes`" in error.message
    # Each component's own limit applies to the calls of its tools.
    result = session_call(mcp.url, "small_extra_echo", {"text": "y" * SMALL_BODY_BYTES})
    assert result.is_error and "`components.small.limits.max-body-bytes`" in result.content[0].text
    assert session_call(mcp.url, "small_extra_echo", {"text": "fits"}).content[0].text == "fits"
    # Declared too large: refused before a byte of the body is read, in JSON-RPC's shape; the connection waits
    # for the rest of the body no longer than the header timeout.
    answer = raw(mcp.app, post(mcp, b"", b"Content-Length: 10000000\r\n"), timeout=HEADER_TIMEOUT_S + 3)
    assert not answer.endswith(b"<timeout>")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"content-type: application/json" in head.lower()
    error_body = json.loads(body)
    assert error_body["jsonrpc"] == "2.0" and error_body["id"] is None and error_body["error"]["code"] == -32600


def test_content_length_with_chunked_is_400_and_never_executed(mcp: McpServer) -> None:
    start = len(mcp.server.lines)
    hello = json.dumps(INITIALIZE).encode()  # executed, it would open a session (and log it)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(hello), hello)
    answer = raw(mcp.app, post(mcp, chunked, b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"), timeout=5)
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1
    assert b"connection: close" in answer.lower() and b"Content-Length and Transfer-Encoding" in answer
    time.sleep(0.5)
    assert not any("session ID" in line for line in mcp.server.lines[start:])


def test_a_body_that_does_not_arrive_in_time_is_408(mcp: McpServer) -> None:
    started = time.monotonic()
    answer = raw(mcp.app, post(mcp, b'{"jsonrpc"', b"Content-Length: 100\r\n"), timeout=BODY_TIMEOUT_S + 5)
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"code": -32600' in answer
    assert time.monotonic() - started < BODY_TIMEOUT_S + 3


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)", status, re.M)
    assert found is not None
    return int(found.group(1))


def test_half_open_metrics_connections_hold_no_thread_and_are_closed(mcp: McpServer) -> None:
    pid = mcp.server.process.pid
    before = _threads(pid)
    half_open = [socket.create_connection(mcp.metrics, timeout=HEADER_TIMEOUT_S + 5) for _ in range(64)]
    try:
        for sock in half_open:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        time.sleep(0.5)
        assert _threads(pid) <= before + 2  # (a threaded server had one more per connection: 64)
        closed = sum(sock.recv(100) == b"" for sock in half_open)  # each within the header timeout
        assert closed == len(half_open)
    finally:
        for sock in half_open:
            sock.close()
    time.sleep(0.2)
    assert raw(mcp.metrics, HEALTHZ).startswith(b"HTTP/1.1 200")


def test_a_bad_argument_is_echoed_cut_short(mcp: McpServer) -> None:
    start = len(mcp.server.lines)
    value = "x" * 150_000  # sent for an s8
    arguments = {"options": {"tone": "plain", "target": {"tag": "whole"}, "tags": []}, "count": value}
    result = session_call(mcp.url, "probe_echo", arguments)
    text = result.content[0].text
    assert result.is_error and text.startswith("invalid arguments: count: expected an integer from -128 to 127")
    assert len(text) < 600 and re.search(r"… \(15\d{4} characters in all\)$", text), text[-100:]
    mcp.server.wait_for_line("invalid arguments: count", 10, start)
    assert max(len(line) for line in mcp.server.lines[start:]) < 1000


def test_sigterm_drains_answers_the_call_in_flight_and_exits_0(config: Path, llmhost_cache_dir: Path) -> None:
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        front = McpServer(server)
        seen: dict[str, Any] = {}

        def readyz() -> bytes:
            return raw(front.metrics, b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

        async def conversation() -> None:
            async with streamable_http_client(front.url) as (read, write, *_), ClientSession(read, write) as session:
                await session.initialize()

                async def spin() -> None:  # a guest that never returns
                    try:
                        seen["result"] = await session.call_tool("probe_fail", {"how": "spin"})
                    except MCPError as error:
                        seen["error"] = error

                async with anyio.create_task_group() as group:
                    group.start_soon(spin)
                    await anyio.sleep(1)
                    seen["ready"] = readyz()
                    seen["signalled"] = time.monotonic()
                    server.process.send_signal(signal.SIGTERM)
                    await anyio.sleep(0.5)
                    seen["draining"] = readyz()

        anyio.run(conversation)
        assert server.process.wait(timeout=GRACE_S + 10) == 0
        elapsed = time.monotonic() - seen["signalled"]
    assert seen["ready"].startswith(b"HTTP/1.1 200") and seen["draining"].startswith(b"HTTP/1.1 503")
    assert "error" in seen, seen.get("result")
    assert seen["error"].message == "the server is shutting down" and seen["error"].code == -32000
    assert elapsed < GRACE_S + 2
    log = "\n".join(server.lines)
    assert "served 1 tool calls" in log and "Traceback" not in log


# --- stdio -------------------------------------------------------------------------------------------------------


def test_stdio_answers_lines_it_cannot_take_and_goes_on(config: Path, llmhost_cache_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(llmhost_cache_dir)
    lines = [
        "this is not JSON",
        json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
        '{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "\\ud800"}}',
        json.dumps({"jsonrpc": "2.0", "id": 8, "method": 5}),
        json.dumps(INITIALIZE),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
    ]
    process = subprocess.Popen(
        [LLMHOST, "mcp", "-c", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    answers: list[dict[str, Any]] = []
    stderr: list[str] = []
    out, err = process.stdout, process.stderr
    threading.Thread(target=lambda: answers.extend(json.loads(line) for line in out), daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(err), daemon=True).start()
    try:
        process.stdin.write("".join(line + "\n" for line in lines))
        process.stdin.flush()
        deadline = time.monotonic() + 120
        while not any(a.get("id") == 10 for a in answers) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.stdin.close()  # the client is done: the server exits
        process.wait(timeout=30)
    errors = [(a.get("id"), a["error"]["code"], a["error"]["message"]) for a in answers if "error" in a]
    assert errors[0][:2] == (None, -32700) and errors[0][2].startswith("Parse error")
    assert errors[1][:2] == (None, -32600) and "batches are not supported" in errors[1][2]
    assert errors[2][:2] == (7, -32700) and "not valid Unicode" in errors[2][2]
    assert errors[3][:2] == (8, -32600)
    results = {a["id"]: a["result"] for a in answers if "result" in a}
    assert results[9]["serverInfo"]["name"] == "llmhost"
    assert sorted(tool["name"] for tool in results[10]["tools"])[:2] == ["probe_echo", "probe_extra_echo"]
    refused = [line for line in stderr if "stdin: refused a line" in line]
    assert len(refused) == 4 and all(len(line) < 600 for line in refused)
    assert process.returncode == 0
