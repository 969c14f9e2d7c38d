"""`llmhost serve` with the real model: streamed tokens reach the client before generation ends, a client that
disconnects cancels its generation and frees its slot, and concurrent generations share the engine fairly."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmhost.engine.local.planning import BURST_STEPS
from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]
PROMPT = "Once%20upon%20a%20time"


@pytest.fixture(scope="module")
def model_server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("serve-model") / "llmhost.toml"
    config.write_text(
        f"""
[models.gemma-3-270m]
slots = 2

[limits]
deadline-s = 120
max-tokens = 4000

[components.probe]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as server:
        server.get_json("/infer?max_tokens=1")  # load the model
        yield server
        assert server.stop() == 0


def read_events(response: object, count: int) -> list[dict[str, object]]:
    events = []
    while len(events) < count:
        line = response.readline()  # type: ignore[attr-defined]
        if line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
        elif not line:
            break
    return events


def test_first_tokens_arrive_long_before_generation_ends(model_server: Server) -> None:
    connection = model_server.connection()
    started = time.monotonic()
    connection.request("GET", f"/stream?prompt={PROMPT}&max_tokens=48")
    response = connection.getresponse()
    first = read_events(response, 1)
    first_at = time.monotonic() - started
    rest = response.read().decode()
    total = time.monotonic() - started
    connection.close()
    assert first and first[0]["generated"] == 1
    assert '"generated": 48' in rest and "event: done" in rest
    assert first_at < total / 3, (first_at, total)


def test_a_disconnect_cancels_the_generation_and_frees_its_slot(model_server: Server) -> None:
    start = len(model_server.lines)
    # Both slots busy with generations that would run for minutes; their clients leave after a few tokens.
    connections, seen = [], []
    for _ in range(2):
        connection = model_server.connection()
        connection.request("GET", f"/stream?prompt={PROMPT}&max_tokens=4000")
        response = connection.getresponse()
        seen.append(int(read_events(response, 3)[-1]["generated"]))  # type: ignore[call-overload]
        connections.append(connection)
    for connection in connections:
        connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
    # A new generation gets a slot at once (it would wait minutes if the abandoned ones went on).
    started = time.monotonic()
    assert model_server.get_json("/infer?max_tokens=4")["ok"]["generated"] == 4
    assert time.monotonic() - started < 5
    for _ in range(2):
        match = model_server.wait_for_line(
            r"GET /stream\S* 200 [\d.]+s tokens=(\d+) \(the client disconnected\)", 10, start
        )
        start = model_server.lines.index(match.string) + 1
        # Cancelled within a decode step of the disconnect: a few tokens past what the client read (at most a burst
        # of steps run while the guest was writing its last chunk), not thousands.
        assert int(match.group(1)) <= max(seen) + BURST_STEPS + 8, (match.string, seen)


def test_concurrent_generations_interleave(model_server: Server) -> None:
    def stream(_: int) -> tuple[float, float]:
        connection = model_server.connection()
        started = time.monotonic()
        connection.request("GET", f"/stream?prompt={PROMPT}&max_tokens=24")
        response = connection.getresponse()
        read_events(response, 1)
        first = time.monotonic() - started
        assert b'"generated": 24' in response.read()
        connection.close()
        return first, time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(stream, range(2)))
    # Both had tokens before either finished: neither waited for the other's whole generation.
    assert max(first for first, _ in results) < min(total for _, total in results), results
