"""The ingress replica: `llmhost serve`'s ASGI app (routes, grants, limits, API keys, metrics listener) for one app
config, inside a Ray Serve replica. Ray's HTTP proxy hands it requests as ASGI; it streams as under uvicorn."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from llmhost.serve.app import Receive, Scope, Send, ServeApp
from llmhost.serve.server import serve_app
from llmhost.serve_ray.options import REPLICA_HEADER
from llmhost.shell.config import settings_for
from llmhost.shell.hosting import observed_host
from llmhost.shell.probes import Readiness

_log = logging.getLogger("llmhost.serve")


class ReplicaApp:
    """The ASGI app of one replica: serve's app, each response naming the replica; the lifespan's shutdown (Serve
    stopping the replica, after its graceful drain) cancels what still runs and closes the host."""

    def __init__(self, app: ServeApp, replica: str, close: contextlib.ExitStack) -> None:
        self._app = app
        self._replica = replica.encode("latin-1")
        self._close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._close.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

        async def named(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (REPLICA_HEADER, self._replica)]}
            await send(message)

        await self._app(scope, receive, named)


class Ingress:
    """A Serve deployment class (made an ASGI ingress by `serve.ingress()` in `build`): loads the app config at
    `config_path` as `llmhost serve -c` does (guest directories built through the cache, every component compiled
    before the replica counts as started)."""

    def __init__(self, config_path: str) -> None:
        from ray import serve

        note = lambda message: _log.info("%s", message)  # noqa: E731
        settings = settings_for(Path(config_path), None, None, None, note=note)
        self.readiness = Readiness()
        self._stack = contextlib.ExitStack()
        host, _engine, metrics = self._stack.enter_context(observed_host(settings, self.readiness))
        app, stop_app = serve_app(host, settings, metrics)

        def stop() -> None:
            self.readiness.ready = False
            stop_app()

        self._stack.callback(stop)  # first, before the host closes
        replica = serve.get_replica_context().replica_id.unique_id
        self._replica_app = ReplicaApp(app, replica, self._stack)
        self.readiness.ready = True
        _log.info("replica %s serving routes %s", replica, ", ".join(f"{p} -> {n}" for p, n in settings.routes.items()))

    def __serve_build_asgi_app__(self) -> ReplicaApp:
        return self._replica_app

    def check_health(self) -> None:
        """Serve's health check: a replica whose host was closed is replaced."""
        if not self.readiness.ready:
            raise RuntimeError("the replica's host is closed")
