"""Real HTTP(S) servers on loopback for the outbound HTTP tests: what guests fetch from, and every fault the issue
lists (a server that never answers, one that trickles, redirect loops, huge bodies). Threads of the test process;
each counts the requests it received (and the connections it accepted), so a test can check that nothing was sent
(and that a connection was kept alive).

    /hello                   200 "hello"
    /echo                    200 JSON: method, path, headers (lower-case names), body (text)
    /status/N                status N, body "status N"
    /big?bytes=N&length=0|1  N bytes ("x"), streamed in 64 KiB pieces, with a content-length or (0) without one
    /never                   reads the request and never answers
    /hang                    never answers, and notes when the client closed the connection (`hung_up`)
    /trickle?ms=M            200 with a content-length of 1 MB, then one byte every M ms
    /redirect?to=URL&status=S   S (302) with `location: URL`
    /loop                    302 to itself (its query kept)
    /set-cookie              200 with `set-cookie: session=...` (for the domain and for every path)
    /bad304                  a 304 that wrongly carries a 5-byte body: what follows on the connection is garbage
    /hops?n=N                302 to /hops?n=N-1, until n=0: 200 "arrived"
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

CHUNK = b"x" * 65536


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: list[str] = []  # "METHOD PATH" of every request received
        self.connections = 0  # accepted
        self.hung_up: list[float] = []  # when (time.monotonic()) each client of /hang closed its connection
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-body, or refused our certificate: what the tests make happen


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without this a kept-alive reply waits 40 ms
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass

    def setup(self) -> None:
        self.server.connections += 1
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._handle()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_GET  # noqa: N815

    def _handle(self) -> None:
        self.server.hits.append(f"{self.command} {self.path}")
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path = url.path
        try:
            if path == "/hello":
                self._reply(200, b"hello", "text/plain")
            elif path == "/echo":
                echoed = {
                    "method": self.command,
                    "path": self.path,
                    "headers": [[k.lower(), v] for k, v in self.headers.items()],
                    "body": body.decode("utf-8", "replace"),
                }
                self._reply(200, json.dumps(echoed).encode(), "application/json")
            elif path.startswith("/status/"):
                code = int(path.rsplit("/", 1)[1])
                self._reply(code, f"status {code}".encode(), "text/plain")
            elif path == "/big":
                self._big(int(q["bytes"]), q.get("length", "1") == "1")
            elif path == "/never":
                self.server.stopping.wait()
            elif path == "/hang":
                self._wait_for_hang_up()
            elif path == "/trickle":
                self.send_response(200)
                self.send_header("content-length", "1000000")
                self.end_headers()
                while not self.server.stopping.wait(int(q.get("ms", "50")) / 1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
            elif path == "/redirect":
                self._redirect(int(q.get("status", "302")), q["to"])
            elif path == "/loop":
                self._redirect(302, self.path)
            elif path == "/set-cookie":
                self.send_response(200)
                self.send_header("set-cookie", "session=cookie-from-upstream; Path=/; Max-Age=3600")
                self.send_header("content-length", "0")
                self.end_headers()
            elif path == "/bad304":  # headers and body in one write: the client reads both at once
                self.wfile.write(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\nhello")
            elif path == "/hops":
                n = int(q["n"])
                if n > 0:
                    self._redirect(302, f"/hops?n={n - 1}")
                else:
                    self._reply(200, b"arrived", "text/plain")
            else:
                self._reply(404, b"no such path", "text/plain")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # the client stopped reading: as it should
            self.close_connection = True

    def _wait_for_hang_up(self) -> None:
        self.connection.settimeout(0.05)
        while not self.server.stopping.is_set():
            try:
                if not self.connection.recv(4096):
                    self.server.hung_up.append(time.monotonic())
                    break
            except TimeoutError:
                continue
            except OSError:  # reset: hung up as well
                self.server.hung_up.append(time.monotonic())
                break
        self.close_connection = True

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-test", "Value")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _redirect(self, status: int, location: str) -> None:
        self.send_response(status)
        self.send_header("location", location)
        self.send_header("content-length", "0")
        self.end_headers()

    def _big(self, size: int, with_length: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        if with_length:
            self.send_header("content-length", str(size))
        else:
            self.close_connection = True  # the body ends when the connection does
        self.end_headers()
        sent = 0
        while sent < size:
            piece = CHUNK[: min(len(CHUNK), size - sent)]
            self.wfile.write(piece)
            sent += len(piece)


class TestServer:
    """A running server: `url(path)`, `port`, `hits`."""

    __test__ = False  # not a pytest class

    def __init__(self, server: _Server, scheme: str) -> None:
        self._server = server
        self.scheme = scheme
        self.port = server.server_address[1]

    @property
    def hits(self) -> list[str]:
        return self._server.hits

    @property
    def connections(self) -> int:
        return self._server.connections

    @property
    def hung_up(self) -> list[float]:
        return self._server.hung_up

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


@contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[TestServer]:
    """A server on 127.0.0.1 (HTTPS with `tls`) for the block."""
    server = _Server()
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield TestServer(server, "https" if tls is not None else "http")
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def self_signed_certificate(directory: Path, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate for DNS name `name` only (no IP address), made by openssl: (cert, key)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def tls_server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
