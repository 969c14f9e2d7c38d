"""The metrics listener (`metrics-listen`): `GET /metrics` (Prometheus text format), `/healthz` (200 while the
process serves) and `/readyz` (200 once every component is compiled and the models its routes need are loaded; 503
before that and during shutdown). A plain threaded WSGI server on its own port, apart from the apps' event loop: a
scrape never waits behind guest traffic, and API keys do not apply to it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from llmhost.serve.metrics import ServeMetrics

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Readiness:
    """Whether the server takes traffic: set once it listens, cleared when it begins to shut down."""

    def __init__(self) -> None:
        self.ready = False


def probes_app(metrics: ServeMetrics, readiness: Readiness) -> WsgiApp:
    """The listener's WSGI app."""
    from prometheus_client import make_wsgi_app

    serve_metrics = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return serve_metrics(environ, start_response)
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            if readiness.ready:
                return _text(start_response, "200 OK", "ready\n")
            return _text(start_response, "503 Service Unavailable", "not ready\n")
        return _text(start_response, "404 Not Found", "not found: this listener serves /metrics, /healthz, /readyz\n")

    return app


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """Scrapes are not logged (one every few seconds would drown the request log)."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class ProbeListener:
    """The listener, serving on a daemon thread from `start()` until `stop()`."""

    def __init__(self, host: str, port: int, metrics: ServeMetrics, readiness: Readiness) -> None:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("_ProbeServer", (_Server,), {"address_family": family})
        try:
            self._server: WSGIServer = make_server(
                host, port, probes_app(metrics, readiness), server_class=server_class, handler_class=_Handler
            )
        except OSError as error:
            raise OSError(f"cannot listen on {host}:{port} for metrics-listen: {error.strerror}") from None
        self.address: tuple[str, int] = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="llmhost-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
