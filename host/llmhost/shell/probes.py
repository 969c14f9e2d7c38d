"""The metrics listener (`metrics-listen`): `GET /metrics` (Prometheus text format), `/healthz` (200 while the
process serves), `/readyz` (200 once every component is compiled and the `serve --preload` models are loaded;
503 before that, naming the models still loading, and during shutdown) and `/models` (each model's residency as
JSON, engine/status.py: what `llmhost models --server` shows; 503 until the engine exists). An ASGI app on its own
port, served through the same front as the apps (`front`: header timeout, connection cap, body limit, framing checks)
on a thread and event loop of its own, apart from the apps' loop: a scrape never waits behind guest traffic, and API
keys do not apply to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from llmhost.engine.status import ModelStatus
from llmhost.shell.front import AsgiApp, Front, Guarded, Listener, Receive, Scope, Send
from llmhost.shell.metrics import ServeMetrics


class Readiness:
    """Whether the server takes traffic: set once it listens (after its `--preload` models loaded), cleared when it
    begins to shut down. `loading`: the preloaded models still loading (/readyz names them)."""

    def __init__(self) -> None:
        self.ready = False
        self.loading: list[str] = []
        self.models: Callable[[], list[ModelStatus]] | None = None  # each model's residency, once the engine exists

    def not_ready(self) -> str:
        return f"not ready: loading {', '.join(self.loading)}\n" if self.loading else "not ready\n"


def probes_app(metrics: ServeMetrics, readiness: Readiness) -> AsgiApp:
    """The listener's ASGI app."""
    from prometheus_client import make_asgi_app

    serve_metrics = make_asgi_app(metrics.registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path == "/metrics":
            await serve_metrics(scope, receive, send)
        elif path == "/healthz":
            await _text(send, 200, "ok\n")
        elif path == "/readyz":
            await _text(send, 200, "ready\n") if readiness.ready else await _text(send, 503, readiness.not_ready())
        elif path == "/models":
            await _models(send, readiness.models)
        else:
            await _text(send, 404, "not found: this listener serves /metrics, /healthz, /readyz, /models\n")

    return app


async def _models(send: Send, models: Callable[[], list[ModelStatus]] | None) -> None:
    """`{"models": [ModelStatus.to_json(), ...]}`, every configured model in config order; loads none."""
    if models is None:
        await _text(send, 503, "not ready: the engine is starting\n")
        return
    body = json.dumps({"models": [status.to_json() for status in models()]}) + "\n"
    await _text(send, 200, body, b"application/json")


async def _text(send: Send, status: int, body: str, content_type: bytes = b"text/plain; charset=utf-8") -> None:
    data = body.encode()
    headers = [(b"content-type", content_type), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


class ProbeListener(Listener):
    """The listener, serving on a daemon thread from `start()` until `stop()`."""

    def __init__(self, host: str, port: int, metrics: ServeMetrics, readiness: Readiness, front: Front) -> None:
        super().__init__(Guarded(probes_app(metrics, readiness), front), host, port, front, "metrics-listen")
