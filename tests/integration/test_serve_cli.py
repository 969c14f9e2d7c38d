"""`llmhost serve` end to end on the fake engine: the real CLI as a subprocess, real HTTP clients on loopback.

One server (module fixture) takes every fault in turn — traps, memory, runaway loops, oversized bodies,
disconnects — and must keep serving; the shutdown tests start their own servers.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmhost.domain.limits import DEADLINE_GRACE_S
from serve_driver import Server, serving

pytestmark = pytest.mark.wasm

DEADLINE_S = 3.0
MEMORY_MB = 64
BODY_LIMIT = 1024
OPEN_TOKEN_LIMIT = 3
CAP_S = 4.0
REQUEST_LINE = r"INFO llmhost\.serve: \[\w+\] {method} {path} (\d+) ([\d.]+)s tokens=(\d+)(.*)$"


def write_config(directory: Path, probe: Path, extra: str = "") -> Path:
    data = directory / "data"
    data.mkdir(exist_ok=True)
    (data / "notes.txt").write_text("granted data")
    config = directory / "llmhost.toml"
    config.write_text(
        f"""
{extra}
[engine]
kind = "fake"

[models.other]          # a second model (the fake engine serves any configured name)

[limits]
deadline-s = {DEADLINE_S}
max-memory-mb = {MEMORY_MB}
max-body-bytes = {BODY_LIMIT}
max-tokens = 20

[components.open]       # no grants
source = "{probe}"
[components.open.limits]
max-tokens = {OPEN_TOKEN_LIMIT}

[components.granted]
source = "{probe}"
allowed-models = ["gemma-3-270m"]
env = {{ GREETING = "hi" }}
read-only-dir = "data"
guest-dir = "/data"

[components.capped]
source = "{probe}"
[components.capped.limits]
max-duration-s = {CAP_S}

[routes]
"/" = "open"
"/granted" = "granted"
"/capped" = "capped"
"""
    )
    return config


@pytest.fixture(scope="module")
def app_config(http_wasm: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("serve"), http_wasm["http_probe"])


@pytest.fixture(scope="module")
def server(app_config: Path, llmhost_cache_dir: Path) -> Iterator[Server]:
    with serving(["-c", str(app_config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0


def request_line(
    server: Server, method: str, path: str, start: int = 0, timeout: float = 10
) -> tuple[int, float, int, str]:
    pattern = REQUEST_LINE.format(method=method, path=path.replace("?", r"\?"))
    match = server.wait_for_line(pattern, timeout, start)
    return int(match.group(1)), float(match.group(2)), int(match.group(3)), match.group(4)


def test_routes_requests_to_components_and_logs_one_line_each(server: Server) -> None:
    start = len(server.lines)
    status, body = server.request("POST", "/echo?x=1", b"payload", {"x-test": "yes"})
    assert status == 200
    echoed = json.loads(body)
    assert echoed["method"] == "POST" and echoed["path"] == "/echo?x=1" and echoed["body"] == "payload"
    assert ["x-test", "yes"] in echoed["headers"]
    assert request_line(server, "POST", "/echo?x=1", start)[:1] == (200,)
    # The longest matching prefix wins: /granted/... goes to the component with the grants.
    assert server.get_json("/granted/env") == {"ok": {"GREETING": "hi"}}
    assert server.get_json("/env") == {"ok": {}}


def test_guests_see_no_host_files_environment_or_network(server: Server, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    for path in (str(secret), "/etc/passwd"):
        assert server.get_json(f"/read?path={path}")["err"]["kind"] == "FileNotFoundError"
        assert server.get_json(f"/granted/read?path={path}")["err"]["kind"] == "FileNotFoundError"
    assert server.get_json("/list?path=/")["err"]["kind"] == "FileNotFoundError"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert server.get_json(f"/connect?port={port}")["err"]["kind"] == "PermissionError"
    # What is granted is readable, read-only, and only for the component it was granted to.
    assert server.get_json("/granted/read?path=/data/notes.txt") == {"ok": "granted data"}
    assert server.get_json("/read?path=/data/notes.txt")["err"]["kind"] == "FileNotFoundError"


def test_a_model_the_component_may_not_use_is_refused_naming_the_key(server: Server, app_config: Path) -> None:
    # One check, one error kind on every path (as for `llmhost run`): model-not-supported, naming the key.
    err = server.get_json("/granted/infer?model=other")["err"]
    assert err["kind"] == "model-not-supported"
    assert f"`components.granted.allowed-models` in {app_config}" in err["message"]
    assert server.get_json("/granted/infer?model=gemma-3-270m&max_tokens=5")["ok"]["text"] == "Hello"
    assert server.get_json("/infer?model=other&max_tokens=2")["ok"]["text"] == "He"  # `open` allows every model


def test_max_tokens_per_request(server: Server, app_config: Path) -> None:
    start = len(server.lines)
    result = server.get_json("/infer?max_tokens=100")["ok"]
    assert result == {"text": "Hel", "finish-reason": "length", "generated": OPEN_TOKEN_LIMIT}
    assert request_line(server, "GET", "/infer?max_tokens=100", start)[2] == OPEN_TOKEN_LIMIT


def test_a_body_over_the_limit_is_413_before_the_guest(server: Server, app_config: Path) -> None:
    start = len(server.lines)
    status, body = server.request("POST", "/echo", b"x" * (BODY_LIMIT + 1))
    assert status == 413
    assert f"`limits.max-body-bytes` in {app_config}" in body.decode()
    # Chunked (no content-length): refused while reading.
    connection = server.connection()
    connection.request("POST", "/echo", body=iter([b"y" * 600, b"y" * 600]), encode_chunked=True)
    assert connection.getresponse().status == 413
    connection.close()
    status, _ = server.request("POST", "/echo", b"x" * BODY_LIMIT)
    assert status == 200
    assert request_line(server, "POST", "/echo", start)[0] == 413


def test_a_trapping_guest_gets_500_with_a_reason_and_the_server_goes_on(server: Server) -> None:
    status, body = server.request("GET", "/trap")
    assert status == 500
    assert body.decode().strip() == "open trapped: RuntimeError: http-probe: deliberate trap"
    status, body = server.request("GET", "/bad-status")
    assert status == 500 and "status 42" in body.decode()
    assert server.request("GET", "/hello") == (200, b"hello")


def test_a_guest_over_its_memory_limit_gets_500(server: Server, app_config: Path) -> None:
    status, body = server.request("GET", f"/alloc?mb={MEMORY_MB * 2}")
    assert status == 500
    assert f"ran out of memory (limit {MEMORY_MB} MB, `limits.max-memory-mb` in {app_config})" in body.decode()
    assert server.get_json("/alloc?mb=8") == {"ok": 8 * 1024 * 1024}


def test_a_runaway_guest_gets_504_at_its_deadline_and_others_are_unaffected(server: Server) -> None:
    outcome: dict[str, object] = {}

    def loop() -> None:
        started = time.monotonic()
        outcome["status"], outcome["body"] = server.request("GET", "/loop")
        outcome["elapsed"] = time.monotonic() - started

    looping = threading.Thread(target=loop)
    looping.start()
    time.sleep(0.3)
    for _ in range(5):  # served meanwhile, each promptly
        started = time.monotonic()
        assert server.request("GET", "/hello") == (200, b"hello")
        assert time.monotonic() - started < 1.0
    looping.join(timeout=DEADLINE_S + 10)
    assert outcome["status"] == 504
    assert "deadline of 3.0 s" in bytes(outcome["body"]).decode()  # type: ignore[arg-type]
    # Interrupted after the grace in which a guest told of its deadline may end its response.
    assert DEADLINE_S <= float(outcome["elapsed"]) < DEADLINE_S + DEADLINE_GRACE_S + 1.5  # type: ignore[arg-type]
    assert server.request("GET", "/hello") == (200, b"hello")


def test_a_stream_making_progress_outlives_the_deadline(server: Server) -> None:
    """`deadline-s` bounds the time to the first byte and between writes, not a stream that makes progress."""
    started = time.monotonic()
    status, body = server.request("GET", "/drip?n=5&ms=1000")
    assert status == 200 and body.endswith(b"tick 4\nend\n")
    assert time.monotonic() - started > DEADLINE_S + 1


def test_a_stalled_stream_is_told_and_ends_its_response_within_the_grace(server: Server) -> None:
    mark = len(server.lines)
    connection = server.connection()
    started = time.monotonic()
    connection.request("GET", "/stall")
    response = connection.getresponse()
    body = response.read()  # a complete chunked body: no IncompleteRead
    elapsed = time.monotonic() - started
    connection.close()
    assert body == b"start\ntold\nend\n"
    assert DEADLINE_S <= elapsed < DEADLINE_S + DEADLINE_GRACE_S
    line = server.wait_for_line(REQUEST_LINE.format(method="GET", path="/stall"), 10, mark)
    assert "ended within the grace" in line.group(4)


def test_max_duration_caps_a_stream_however_steady(server: Server) -> None:
    connection = server.connection()
    started = time.monotonic()
    connection.request("GET", "/capped/drip?n=100&ms=300")
    response = connection.getresponse()
    with pytest.raises(http.client.IncompleteRead):  # cut: the guest did not end it (it ignores its deadline)
        response.read()
    connection.close()
    assert CAP_S <= time.monotonic() - started < CAP_S + DEADLINE_GRACE_S + 1.5


def test_streamed_bytes_reach_the_client_before_the_guest_finishes(server: Server) -> None:
    connection = server.connection()
    started = time.monotonic()
    connection.request("GET", "/drip?n=20&ms=50")
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("transfer-encoding") == "chunked"
    first = response.readline()
    first_at = time.monotonic() - started
    rest = response.read()
    total = time.monotonic() - started
    connection.close()
    assert first == b"tick 0\n"
    assert rest.endswith(b"tick 19\nend\n")
    assert total >= 1.0 and first_at < 0.5


def test_a_client_that_disconnects_mid_stream_ends_its_request(server: Server) -> None:
    start = len(server.lines)
    connection = server.connection()
    connection.request("GET", "/drip?n=1000&ms=10")  # 10 s if nobody stopped it
    response = connection.getresponse()
    assert response.readline() == b"tick 0\n"
    closed_at = time.monotonic()
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    status, duration, _, note = request_line(server, "GET", "/drip?n=1000&ms=10", start, timeout=5)
    assert note == " (the client disconnected)"
    assert time.monotonic() - closed_at < 2 and duration < 3


def test_fake_streams_over_http(server: Server) -> None:
    status, body = server.request("GET", "/granted/stream?max_tokens=5")
    assert status == 200
    events = [e for e in body.decode().split("\n\n") if e]
    assert [json.loads(e.removeprefix("data: "))["text"] for e in events[:-1]] == list("Hello")
    assert events[-1].startswith("event: done")


def test_concurrent_requests_run_in_parallel(server: Server) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: server.get_json("/spin?s=1"), range(4)))
    elapsed = time.monotonic() - started
    assert all(r["ok"] > 0 for r in results)
    assert elapsed < 3.5  # one at a time would take at least 4 s (2 cores: about 2 s)


@pytest.mark.slow  # soak: 200 requests
def test_load_200_requests_at_concurrency_16_no_errors_and_flat_memory(server: Server) -> None:
    def batch(count: int) -> list[int]:
        def worker(n: int) -> list[int]:
            connection = server.connection()  # keep-alive: one connection per client thread
            statuses = []
            for _ in range(n):
                connection.request("GET", "/hello")
                response = connection.getresponse()
                assert response.read() == b"hello"
                statuses.append(response.status)
            connection.close()
            return statuses

        with ThreadPoolExecutor(16) as pool:
            per_worker = [count // 16 + (1 if i < count % 16 else 0) for i in range(16)]
            return [s for statuses in pool.map(worker, per_worker) for s in statuses]

    assert batch(100).count(200) == 100  # warm-up: every worker thread has run a guest
    rss_before = server.rss_kb()
    statuses = batch(200)
    rss_after = server.rss_kb()
    assert statuses == [200] * 200
    assert rss_after < rss_before * 1.05, (rss_before, rss_after)


def test_fair_queue_serves_every_stream_with_one_slot(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, http_wasm["http_probe"])
    config.write_text(
        config.read_text().replace("[models.other]", "[models.gemma-3-270m]\nslots = 1\n\n[models.other]")
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as one_slot:
        with ThreadPoolExecutor(12) as pool:
            bodies = list(pool.map(lambda _: one_slot.request("GET", "/granted/stream?max_tokens=10"), range(12)))
        assert all(status == 200 for status, _ in bodies)
        assert all(b"event: done" in body and b'"generated": 10' in body for _, body in bodies)
        assert one_slot.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lets_in_flight_requests_finish_then_exits_0(
    sig: int, http_wasm: dict[str, Path], llmhost_cache_dir: Path
) -> None:
    with serving([str(http_wasm["http_probe"]), "-c", "/dev/null"], llmhost_cache_dir) as single:
        connection = single.connection()
        connection.request("GET", "/drip?n=20&ms=50")
        response = connection.getresponse()
        assert response.readline() == b"tick 0\n"
        single.process.send_signal(sig)
        assert response.read().endswith(b"tick 19\nend\n")  # the in-flight response completes
        connection.close()
        assert single.stop(sig) == 0
        with pytest.raises(OSError):  # no longer accepting
            single.request("GET", "/hello")
        assert any("stopped" in line for line in single.lines)
