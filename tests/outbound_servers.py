"""Real HTTP(S) servers on loopback for the outbound HTTP tests: what guests fetch from, and every fault the issue
lists (a server that never answers, one that trickles, redirect loops, huge bodies). Threads of the test process;
each counts the requests it received, so a test can check that nothing was sent.

    /hello                   200 "hello"
    /echo                    200 JSON: method, path, headers (lower-case names), body (text)
    /status/N                status N, body "status N"
    /big?bytes=N&length=0|1  N bytes ("x"), streamed in 64 KiB pieces, with a content-length or (0) without one
    /never                   reads the request and never answers
    /trickle?ms=M            200 with a content-length of 1 MB, then one byte every M ms
    /redirect?to=URL&status=S   S (302) with `location: URL`
    /loop                    302 to /loop
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
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-body, or refused our certificate: what the tests make happen


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without this a kept-alive reply waits 40 ms
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass

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
                self._redirect(302, "/loop")
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
