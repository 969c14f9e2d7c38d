"""`llmhost mcp --listen` with the real model, held to `llmhost serve`'s standard:

- a tool call whose client goes away stops within a decode step, frees its slot and is counted 499, however the
  client went: curl killed mid-stream (with and without a progress token; and on the 2026 single-exchange path,
  whose answer waits as JSON before it commits to a stream), and the official SDK's client killed;
- SIGTERM stops a generation in flight near the end of the grace and answers its call with a JSON-RPC error, and the
  process exits 0.

The tool guest is tests/guests/mcp_probe (`generate`: greedy `infer`, one long generation here).
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from serve_driver import METRICS_LINE, Samples, Server, delta, scrape, serving, value

from .conftest import MODEL

pytestmark = [pytest.mark.model, pytest.mark.wasm]

PROMPT = "The capital of France is"
MAX_TOKENS = 3000  # a generation stopped long before its end (the context is 4,096 tokens)
STOP_BOUND_S = 30  # generous: the call stops within a decode step of the disconnect
GRACE_S = 4
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"  # the single-exchange protocol revision (no session)
ACCEPT = "application/json, text/event-stream"


def _config(folder: Path, probe: Path, grace_s: float = 10) -> Path:
    config = folder / "mcp.toml"
    config.write_text(
        f"""
metrics-listen = "127.0.0.1:0"
shutdown-grace-s = {grace_s}

[limits]
deadline-s = 300

[components.probe]
source = "{probe}"
allowed-models = ["{MODEL}"]
"""
    )
    return config


class Running:
    def __init__(self, server: Server) -> None:
        self.server = server
        match = server.wait_for_line(METRICS_LINE.pattern, 10)
        self.metrics = (match.group(1), int(match.group(2)))
        self.url = f"http://{server.host}:{server.port}/mcp"
        deadline = time.monotonic() + 10
        while True:  # (before the front, the "listening" line came before the port took connections)
            try:
                socket.create_connection((server.host, server.port), timeout=1).close()
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the MCP port takes no connection"
                time.sleep(0.1)

    def samples(self) -> Samples:
        return scrape(*self.metrics)

    def wait_for(self, what: str, check: Any, timeout: float) -> Samples:
        """Scrape until `check(samples)` holds; fails naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.samples()
            if check(samples):
                return samples
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def running(
    tool_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    config = _config(tmp_path_factory.mktemp("mcp-hardening"), tool_wasm["mcp_probe"])
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        yield Running(server)


def _post(running: Running, message: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(running.server.host, running.server.port, timeout=30)
    try:
        connection.request("POST", "/mcp", json.dumps(message), {"content-type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def session_id(running: Running) -> str:
    """An initialized session (2025-11-25 handshake) for curl's calls."""
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "curl", "version": "8"}},
    }
    status, headers, body = _post(running, hello, {"accept": ACCEPT})
    assert status == 200 and b'"serverInfo"' in body, body[:300]
    session = headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, _ = _post(running, initialized, {"accept": ACCEPT, "mcp-session-id": session})
    assert status == 202
    return session


def _curl(running: Running, session_id: str, how: str) -> subprocess.Popen[bytes]:
    """curl POSTing one long `generate` call, its response streamed to nowhere."""
    params: dict[str, Any] = {"name": "generate", "arguments": {"prompt": PROMPT, "max-tokens": MAX_TOKENS}}
    headers = [f"accept: {ACCEPT}", "content-type: application/json"]
    if how == "modern":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers += [f"mcp-protocol-version: {MODERN}", "mcp-method: tools/call", "mcp-name: generate"]
    else:
        headers += [f"mcp-session-id: {session_id}", f"mcp-protocol-version: {HANDSHAKE}"]
        if how == "progress":
            params["_meta"] = {"progressToken": "p1"}
    body = json.dumps({"jsonrpc": "2.0", "id": f"call-{how}", "method": "tools/call", "params": params})
    argv = ["curl", "-sN", "-X", "POST", running.url, "--data-binary", body]
    for header in headers:
        argv += ["-H", header]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


SDK_CLIENT = """
import sys, anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(sys.argv[1]) as (read, write, *_), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("generate", {"prompt": sys.argv[2], "max-tokens": int(sys.argv[3])})

anyio.run(main)
"""


def _busy(samples: Samples) -> float:
    return value(samples, "llmhost_slots_busy", model=MODEL)


@pytest.mark.parametrize("how", ["curl", "progress", "modern", "sdk"])
def test_a_call_whose_client_is_killed_stops_frees_its_slot_and_counts_499(
    running: Running, session_id: str, how: str
) -> None:
    start = len(running.server.lines)
    before = running.samples()
    if how == "sdk":
        client = subprocess.Popen([sys.executable, "-c", SDK_CLIENT, running.url, PROMPT, str(MAX_TOKENS)])
    else:
        client = _curl(running, session_id, how)
    try:

        def generating(samples: Samples) -> bool:
            steps = delta(before, samples, "llmhost_decode_steps_total", model=MODEL)
            return _busy(samples) >= 1 and steps >= 5

        at_kill = running.wait_for("the generation to start", generating, 120)
    finally:
        client.kill()
        client.wait()
    stopped = running.wait_for(
        "the call to stop, free its slot and count 499",
        lambda s: _busy(s) == 0 and delta(before, s, "llmhost_requests_total", component="probe", status="499") == 1,
        STOP_BOUND_S,
    )
    time.sleep(1)
    later = running.samples()
    # Nothing decodes any more, and the generation ended soon after the kill, far from its 3,000 tokens.
    assert delta(stopped, later, "llmhost_decode_steps_total", model=MODEL) == 0
    assert delta(stopped, later, "llmhost_generated_tokens_total", model=MODEL) == 0
    generated = delta(before, later, "llmhost_generated_tokens_total", model=MODEL)
    assert 0 < generated < 200, generated
    assert delta(at_kill, later, "llmhost_decode_rows_total", model=MODEL) < 100
    assert delta(before, later, "llmhost_requests_total", component="probe", status="200") == 0
    running.server.wait_for_line(r"generate: (cancelled by the client|cancelled: the client disconnected)", 10, start)
    log = running.server.lines[start:]
    assert not any("Traceback" in line or " ERROR " in line for line in log), "\n".join(log)


def test_sigterm_answers_a_generation_in_flight_with_a_jsonrpc_error_and_exits_0(
    tool_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path: Path
) -> None:
    config = _config(tmp_path, tool_wasm["mcp_probe"], GRACE_S)
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        running = Running(server)
        seen: dict[str, Any] = {}

        async def conversation() -> None:
            async with streamable_http_client(running.url) as (read, write, *_), ClientSession(read, write) as session:
                await session.initialize()

                async def generate() -> None:
                    try:
                        arguments = {"prompt": PROMPT, "max-tokens": MAX_TOKENS}
                        seen["result"] = await session.call_tool("generate", arguments)
                    except MCPError as error:
                        seen["error"] = error

                async with anyio.create_task_group() as group:
                    group.start_soon(generate)
                    await anyio.to_thread.run_sync(
                        lambda: running.wait_for("the generation to start", lambda s: _busy(s) >= 1, 120)
                    )
                    seen["signalled"] = time.monotonic()
                    server.process.send_signal(signal.SIGTERM)

        anyio.run(conversation)
        assert server.process.wait(timeout=GRACE_S + 10) == 0
        elapsed = time.monotonic() - seen["signalled"]
    assert "error" in seen, seen.get("result")
    assert seen["error"].message == "the server is shutting down" and seen["error"].code == -32000
    # It ran on until SHUTDOWN_CANCEL_MARGIN_S (2 s) before the grace ended, then stopped: the process exits within
    # the grace.
    assert GRACE_S - 2.5 < elapsed < GRACE_S + 2, elapsed
    log = "\n".join(server.lines)
    assert "generate: the server is shutting down" in log and "served 1 tool calls" in log
    assert "Traceback" not in log and "still running" not in log
