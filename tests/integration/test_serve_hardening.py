"""Hardening of `llmhost run` and `llmhost serve`, each defect through the real path: a built guest under
`llmhost run`, or a raw socket client against a real `llmhost serve` (fake engine) on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.toolchains.python import build_component
from serve_driver import Server, serving

pytestmark = pytest.mark.wasm
LLMHOST = str(Path(sys.executable).with_name("llmhost"))
HEADER_TIMEOUT_S = 2
MAX_LOG_BYTES = 10_000


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("harden") / "llmhost.toml"
    config.write_text(
        f"""
header-timeout-s = {HEADER_TIMEOUT_S}
max-log-bytes = {MAX_LOG_BYTES}
shutdown-grace-s = 10

[engine]
kind = "fake"

[limits]
deadline-s = 60

[components.probe]
source = "{http_wasm["http_probe"]}"
[components.admin]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"/admin" = "admin"
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running


def raw(server: Server, data: bytes, timeout: float = 10) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_big_single_write_reaches_llmhost_run_whole(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "big"
    guest.mkdir()
    (guest / "app.py").write_text(
        "import sys\nfrom wit_world import WitWorld\n\n\nclass WitWorld(WitWorld):\n    def run(self, args):\n"
        "        sys.stdout.write('x' * int(args[0]))\n        sys.stderr.write('e' * int(args[0]))\n        return 0\n"
    )
    wasm = build_component(guest, tmp_path / "big.wasm", cache_dir=llmhost_cache_dir)
    env = dict(os.environ, LLMHOST_CACHE_DIR=str(llmhost_cache_dir))
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        done = subprocess.run([LLMHOST, "run", str(wasm), "--", "20000000"], stdout=out, stderr=err, env=env)
    assert done.returncode == 0
    assert (tmp_path / "out").stat().st_size == 20_000_000
    assert (tmp_path / "err").read_bytes().count(b"e") == 20_000_000


def test_guest_output_is_capped_prefixed_and_bounded_in_memory(server: Server) -> None:
    start = len(server.lines)
    rss_before = server.rss_kb()
    status, body = server.request("GET", "/noise?bytes=100000000&to=stderr")
    assert status == 200, body
    status, _ = server.request("GET", "/noise?bytes=5000&to=stdout")
    assert status == 200
    server.wait_for_line(r"GET /noise\?bytes=5000", 10, start)
    lines = server.lines[start:]
    guest_lines = [line for line in lines if "llmhost.serve.guest" in line]
    # At most MAX_LOG_BYTES of each request's output, one record per line, each naming component and request.
    assert 0 < sum(len(line) for line in guest_lines) < 3 * MAX_LOG_BYTES
    assert all(" probe [" in line for line in guest_lines)
    assert any("stdout: " + "x" * 99 in line for line in guest_lines)  # stdout is captured too, and marked
    assert any("more bytes not logged" in line and "max-log-bytes" in line for line in guest_lines)
    assert server.rss_kb() - rss_before < 150_000  # 100 MB written, far less kept


def test_a_slow_loris_connection_is_closed_while_others_are_served(server: Server) -> None:
    sock = socket.create_connection((server.host, server.port), timeout=30)
    started = time.monotonic()
    closed_after: list[float] = []

    def dribble() -> None:
        try:
            for byte in b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass
        finally:
            closed_after.append(time.monotonic() - started)

    thread = threading.Thread(target=dribble)
    thread.start()
    assert server.request("GET", "/hello") == (200, b"hello")  # served meanwhile
    thread.join(timeout=30)
    sock.close()
    assert closed_after and closed_after[0] < HEADER_TIMEOUT_S + 3


def test_content_length_with_chunked_is_400_and_the_smuggled_request_never_runs(server: Server) -> None:
    start = len(server.lines)
    smuggled = b"GET /noise?bytes=7777&to=stdout HTTP/1.1\r\nHost: x\r\n\r\n"
    request = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
    )
    answer = raw(server, request, timeout=5)
    assert answer.startswith(b"HTTP/1.1 400")
    assert answer.count(b"HTTP/1.1") == 1 and b"connection: close" in answer.lower()
    time.sleep(0.5)
    assert not any("bytes=7777" in line for line in server.lines[start:])


def test_204_has_no_body_and_no_content_length(server: Server) -> None:
    answer = raw(server, b"GET /nocontent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 204")
    assert b"content-length" not in head.lower() and body == b""


def test_routing_and_the_guest_see_the_same_raw_path(server: Server) -> None:
    # `/%61dmin` is not `/admin`: it goes to the `/` component, which sees the path as sent.
    status, body = server.request("GET", "/%61dmin/echo")
    assert status == 200 and json.loads(body)["path"] == "/%61dmin/echo"
    start = len(server.lines)
    server.request("GET", "/admin/echo")
    server.wait_for_line(r"GET /admin/echo 200", 10, start)


def test_an_absolute_form_target_is_served(server: Server) -> None:
    answer = raw(
        server,
        f"GET http://{server.host}:{server.port}/hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")


def test_sigterm_ends_every_request_within_the_grace_and_leaves_no_file(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(
        f"""
shutdown-grace-s = 4

[engine]
kind = "fake"

[limits]
deadline-s = 60

[components.probe]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"""
    )
    temp = tmp_path / "tmp"  # the server's temporary files (each request captures its guest's output in two)
    temp.mkdir()
    with serving(["-c", str(config)], llmhost_cache_dir, extra_env={"TMPDIR": str(temp)}) as running:
        results: list[tuple[str, bytes]] = []

        def client(path: str) -> None:
            results.append((path, raw(running, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), timeout=30)))

        threads = [
            threading.Thread(target=client, args=("/drip?n=1000&ms=50",)),  # a stream that would take 50 s
            threading.Thread(target=client, args=("/loop",)),  # a guest computing forever, never calling the host
        ]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        # The captured output's files have no name while the guests run: an exit mid-run cannot leave them.
        assert not list(temp.glob("llmhost-output-*"))
        started = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=30) == 0
        elapsed = time.monotonic() - started
        for thread in threads:
            thread.join(timeout=10)
    assert elapsed < 4 + 2, elapsed
    assert not list(temp.glob("llmhost-output-*"))  # the looping guest never returned, and left nothing behind
    by_path = dict(results)
    drip = by_path["/drip?n=1000&ms=50"]
    assert drip.startswith(b"HTTP/1.1 200") and drip.endswith(b"0\r\n\r\n")  # a clean end of the chunked body
    spin = by_path["/loop"]
    assert spin.startswith(b"HTTP/1.1 503")
    # The log says what the clients got.
    assert any(" 503 " in line and "/loop" in line for line in running.lines)


def test_guest_log_lines_show_control_characters_escaped(server: Server) -> None:
    start = len(server.lines)
    # ESC[2K ESC[G would erase the line's prefix on a terminal; NUL, backspace, DEL and C1 controls hide text.
    status, _ = server.request("GET", "/say?text=%1b%5b2K%1b%5bGforged%08%00%7f%c2%85end%09tab")
    assert status == 200
    server.wait_for_line(r"GET /say", 10, start)
    said = [line for line in server.lines[start:] if "stderr:" in line and "forged" in line]
    assert len(said) == 1
    line = said[0]
    assert "llmhost.serve.guest: probe [" in line
    assert "stderr: \\x1b[2K\\x1b[Gforged\\x08\\x00\\x7f\\x85end\ttab" in line
    assert not any(ch in line for ch in "\x1b\x08\x00\x7f\x85")


def closed_answer(server: Server, data: bytes, within_s: float = 3.0) -> bytes:
    """Send `data` and read until the server closes the connection; fails if it does not within `within_s`."""
    with socket.create_connection((server.host, server.port), timeout=within_s) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):  # a timeout here (the connection left open) fails the test
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hello\r\n",  # HTTP/0.9: no version
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nabc",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\n",  # TLS sent to a plain-HTTP port
    ],
    ids=["http-0.9", "absurd-chunk-size", "tls"],
)
def test_malformed_framing_gets_400_and_the_connection_closes_at_once(server: Server, request_bytes: bytes) -> None:
    answer = closed_answer(server, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in answer.lower()
    assert server.request("GET", "/hello") == (200, b"hello")


def test_a_chunk_over_the_body_limit_gets_413_at_once(server: Server) -> None:
    answer = closed_answer(
        server, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\nabc"
    )
    assert answer.startswith(b"HTTP/1.1 413 ")


def test_a_low_descriptor_limit_lowers_max_connections_and_never_floods_the_log(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(
        f"""
max-connections = 1000
max-concurrency = 4
header-timeout-s = 30

[engine]
kind = "fake"

[components.probe]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"""
    )
    limit = 160
    with serving(["-c", str(config)], llmhost_cache_dir, nofile=limit) as running:
        lowered = running.wait_for_line(r"max-connections lowered from 1000 to (\d+)", 5)
        assert int(lowered.group(1)) < limit
        start = len(running.lines)
        idle = []
        try:
            for _ in range(2 * limit):  # more than the process can hold: idle connections that send nothing
                try:
                    idle.append(socket.create_connection((running.host, running.port), timeout=5))
                except OSError:
                    break
            time.sleep(3)  # the server goes on failing to accept them meanwhile
        finally:
            for sock in idle:
                sock.close()
        time.sleep(1.5)  # asyncio retries accepting a second after EMFILE
        assert running.request("GET", "/hello") == (200, b"hello")
        log = running.lines[start:]
        assert len(log) < 20, log[:20]
        assert not any("Traceback" in line for line in log)
