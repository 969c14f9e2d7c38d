"""`llmhost mcp --listen`: the SDK's Streamable HTTP app (at `/mcp`) behind the shared front (`shell.front`).

The front gives it serve's header timeout, connection cap, body timeout and limit, framing checks and graceful
shutdown, each refusal a JSON-RPC error an MCP client shows; API keys are checked before a body is read. The front
also tells a call that its client has gone (a killed curl or SDK client, with or without a progress token, in
either response mode): `ToolServer.call` then cancels it, as serve cancels a request.

On SIGINT/SIGTERM the listener stops accepting and /readyz says 503; calls in flight go on for the grace (less its
margin), then are stopped and answered with a JSON-RPC error; the event streams still open (a client's GET stream)
are then ended cleanly, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import anyio

from llmhost.mcp.calls import ToolServer, mcp_server
from llmhost.shell.auth import ApiKeys
from llmhost.shell.front import (
    CLIENT_GONE,
    Front,
    Gate,
    Guarded,
    Message,
    Receive,
    Scope,
    Send,
    bind,
    front_of,
    front_server,
    url_host,
)
from llmhost.shell.probes import Readiness
from llmhost.shell.watch import Watcher

_log = logging.getLogger("llmhost.mcp")

INVALID_REQUEST = -32600
UNAUTHORIZED = "missing or wrong API key (Authorization: Bearer KEY)"
END_WAIT_S = 1.0  # at shutdown, how long ending one open response may wait for the app's send under way


def jsonrpc_refusal(status: int, reason: str) -> tuple[bytes, bytes]:
    """A refusal as the JSON-RPC error the MCP SDK's client reads from a non-2xx answer (and shows its message)."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": reason}}
    return b"application/json", json.dumps(error).encode()


def key_gate(keys: ApiKeys) -> Gate:
    def gate(scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        return None if keys.allows(headers) else (401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])

    return gate


class _Response:
    """One request's response as the app sends it, so that a shutdown can end an open event stream cleanly (its
    last chunk) instead of cutting it."""

    def __init__(self, send: Send, gone: anyio.Event) -> None:
        self._send = send
        self._gone = gone
        self._lock = anyio.Lock()
        self.started = False
        self.ended = False

    async def send(self, message: Message) -> None:
        async with self._lock:
            if self.ended:  # ended at shutdown: the app's late writes go nowhere
                return
            if message["type"] == "http.response.start":
                self.started = True
            elif not message.get("more_body", False):
                self.ended = True
            await self._send(message)

    async def end(self) -> None:
        with anyio.move_on_after(END_WAIT_S):
            async with self._lock:
                if self.started and not self.ended:
                    self.ended = True
                    with contextlib.suppress(OSError):
                        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        self._gone.set()  # the app's stream sees its client gone, and stops


class McpHttp:
    """The ASGI app of `mcp --listen`."""

    def __init__(self, tools: ToolServer, front: Front, watching: bool = False) -> None:
        settings = tools.settings
        sdk = mcp_server(tools, watching).streamable_http_app(
            host=settings.listen[0], max_request_body_size=max(1, front.max_body_bytes)
        )
        self._sdk = sdk
        gate = key_gate(settings.api_keys) if settings.api_keys else None
        self._app = Guarded(self._tracked, front, jsonrpc_refusal, gate)
        self._open: set[_Response] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    async def _tracked(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the SDK's session manager runs in it
            await self._sdk(scope, receive, send)
            return
        response = _Response(send, scope[CLIENT_GONE])
        self._open.add(response)
        try:
            await self._sdk(scope, receive, response.send)
        finally:
            self._open.discard(response)

    async def end_responses(self) -> None:
        """End every response still open (at shutdown, once the calls are answered: the GET event streams)."""
        for response in list(self._open):
            await response.end()


def serve_http(tools: ToolServer, readiness: Readiness, watcher: Watcher[Any] | None = None) -> None:
    """Serve Streamable HTTP at `http://LISTEN/mcp` until SIGINT/SIGTERM, then drain (see the module's docstring).
    `watcher` (`--watch`) watches from the start until the shutdown begins."""
    from sse_starlette.sse import AppStatus

    from llmhost.shell.hosting import fit_connections

    settings = tools.settings
    front = front_of(settings)
    max_connections = fit_connections(settings)
    app = McpHttp(tools, front, watching=watcher is not None)
    sock = bind(*settings.listen)
    shown_host, port = sock.getsockname()[:2]
    # sse-starlette cuts every event stream at the signal, a call's included (its answer lost): the drain ends them.
    AppStatus.disable_automatic_graceful_drain()
    loop: asyncio.AbstractEventLoop | None = None
    drains: list[asyncio.Task[None]] = []

    def started() -> None:
        nonlocal loop
        loop = asyncio.get_running_loop()
        _log.info("listening on http://%s:%d/mcp (MCP Streamable HTTP)", url_host(shown_host), port)
        readiness.ready = True
        if watcher is not None:
            watcher.start()

    async def drain() -> None:
        await tools.drain(settings.shutdown_grace_s)
        await app.end_responses()

    def begin_shutdown() -> None:  # in the signal handler: the drain runs on the loop
        readiness.ready = False  # /readyz: 503 from now on
        if watcher is not None:
            watcher.stop()
        if loop is not None:
            loop.call_soon_threadsafe(lambda: drains.append(asyncio.ensure_future(drain())))

    server = front_server(app, front, max_connections, started, begin_shutdown, lifespan=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
