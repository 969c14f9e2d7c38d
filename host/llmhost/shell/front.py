"""The HTTP front every listener of llmhost shares: `serve`'s apps, `mcp --listen` and the metrics listener.

One uvicorn server (h11) per listener, built the same way for any ASGI app:

- a request's head must arrive within `header-timeout-s` (slow-loris connections are closed), and malformed
  framing (an HTTP/0.9 line, TLS sent to a plain port, an absurd chunk size) is refused at once (`protocol`);
- at most `max-connections` connections at once, idle keep-alive ones included (more are answered 503), checked
  at start-up against the open-files limit (`fit_descriptors`);
- SIGINT/SIGTERM stop accepting and let in-flight requests finish for `shutdown-grace-s`, then the process
  exits 0 (uvicorn's own handler would end it by the signal).

`Guarded` adds, for apps that take a request's body whole (MCP, the probes), what `serve`'s own app does per
route: Content-Length with Transfer-Encoding is 400 and the connection closes, the body must arrive within
`body-timeout-s` (408) and fit `max-body-bytes` (413, answered before the rest is read, which is then dropped
so that a client still sending reads the answer); refusals take the shape the app's clients read (plain text, or
a JSON-RPC error for MCP). Past the body, the client's disconnect is noticed at once and told to the app,
in `scope[CLIENT_GONE]` as well as through `receive`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn

from llmhost.domain.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SHUTDOWN_GRACE_S,
    FD_RESERVE,
    FD_WARNING_INTERVAL_S,
    FDS_PER_REQUEST,
)
from llmhost.shell.config import ServeSettings
from llmhost.shell.protocol import protocol_with_header_timeout

_log = logging.getLogger("llmhost.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Keys `Guarded` adds to an HTTP request's scope: an anyio.Event set once the client has gone, and the body's size.
CLIENT_GONE = "llmhost.client_gone"
BODY_BYTES = "llmhost.body_bytes"
LISTEN_BACKLOG = 2048  # uvicorn's default
LISTENER_START_S = 5.0
BOTH_FRAMINGS = "a request with both Content-Length and Transfer-Encoding is refused"


@dataclass(frozen=True)
class Front:
    """A listener's HTTP settings (the app config's keys of the same names)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # the largest body any route (component) takes
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    max_body_key: str = "`limits.max-body-bytes`"  # the key that set `max_body_bytes`, as messages name it


def front_of(settings: ServeSettings) -> Front:
    """The front of `settings`' listener: its body limit is the largest of its components'."""
    largest = max(settings.components.values(), key=lambda c: c.limits.max_body_bytes, default=None)
    return Front(
        settings.header_timeout_s,
        settings.body_timeout_s,
        settings.max_connections,
        largest.limits.max_body_bytes if largest is not None else DEFAULT_MAX_BODY_BYTES,
        settings.shutdown_grace_s,
        largest.limit_key("max_body_bytes") if largest is not None else Front.max_body_key,
    )


# --- the server -------------------------------------------------------------------------------------------------


class FrontServer(uvicorn.Server):
    """uvicorn's server with our own signal handling: on SIGINT/SIGTERM it stops accepting and lets in-flight
    requests finish (bounded by `timeout_graceful_shutdown`), and the process then exits 0 — uvicorn's own
    handler re-raises the signal after shutting down, which would end the process with the signal's status.
    Off the main thread (the metrics listener) it takes no signals: `should_exit` stops it."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_started: Callable[[], None] = lambda: None,
        on_shutdown: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config)
        self._on_started = on_started
        self._on_shutdown = on_shutdown
        self._shutdown_begun = False

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        if not self._shutdown_begun:
            self._shutdown_begun = True
            self._on_shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(DescriptorWarnings().handle)
        await super().startup(sockets)
        if self.started:
            self._on_started()


def front_server(
    app: AsgiApp,
    front: Front,
    max_connections: int | None = None,
    on_started: Callable[[], None] = lambda: None,
    on_shutdown: Callable[[], None] = lambda: None,
    lifespan: bool = False,
) -> FrontServer:
    """The server of one listener for `app` (run it with `.run(sockets=[sock])`). `max_connections`: as
    `fit_descriptors` left it (default: the front's)."""
    config = uvicorn.Config(
        app,
        http=protocol_with_header_timeout(front.header_timeout_s, front.max_body_bytes),
        # Connections at once, idle keep-alive ones included: more are answered 503 (and slow-loris ones are
        # closed by the header timeout, so they cannot hold the places for long).
        limit_concurrency=max_connections if max_connections is not None else front.max_connections,
        loop="asyncio",
        ws="none",
        lifespan="on" if lifespan else "off",
        log_config=None,
        access_log=False,  # each app logs its requests itself, with what a line needs
        timeout_graceful_shutdown=max(1, round(front.shutdown_grace_s)),
    )
    return FrontServer(config, on_started, on_shutdown)


class Listener:
    """A front on a thread of its own, with its own event loop (the metrics listener: a scrape never waits behind
    the apps' traffic), serving from `start()` until `stop()`."""

    def __init__(self, app: AsgiApp, host: str, port: int, front: Front, what: str) -> None:
        self._sock = bind(host, port, what)
        self._sock.listen(LISTEN_BACKLOG)  # connections wait in the backlog until the loop takes them
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._started = threading.Event()
        self._server = front_server(app, front, on_started=self._started.set)
        self._thread = threading.Thread(target=self._run, name=f"llmhost-{what}", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self._sock])

    def start(self) -> None:
        """Start serving; returns once it serves (or `LISTENER_START_S` passed)."""
        self._thread.start()
        self._started.wait(LISTENER_START_S)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._sock.close()


def bind(host: str, port: int, what: str = "") -> socket.socket:
    """A listening socket's address bound (`what`: the key it came from, for the error)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        key = f" for {what}" if what else ""
        raise OSError(f"cannot listen on {host}:{port}{key}: {error.strerror}") from None
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    """A listening address's host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


# --- file descriptors -------------------------------------------------------------------------------------------


class DescriptorWarnings:
    """The event loop's exception handler: when descriptors run out (accept fails with EMFILE/ENFILE, and asyncio
    retries a second later), one warning per `FD_WARNING_INTERVAL_S` instead of a traceback each time;
    everything else goes to asyncio's default handler."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: float | None = None
        self.suppressed = 0

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if not (isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)):
            loop.default_exception_handler(context)
            return
        now = self._clock()
        if self._last is not None and now - self._last < FD_WARNING_INTERVAL_S:
            self.suppressed += 1
            return
        self._last = now
        more = f" ({self.suppressed} more since the last warning)" if self.suppressed else ""
        self.suppressed = 0
        _log.warning(
            "out of file descriptors (%s): new connections wait until some close%s; lower `max-connections` or "
            "raise the open-files limit (ulimit -n)",
            error.strerror,
            more,
        )


def plan_descriptors(
    max_connections: int, max_concurrency: int, soft: int, hard: int, other_connections: int = 0
) -> tuple[int, int]:
    """The soft RLIMIT_NOFILE to set and the max-connections to serve with: connections plus the reserve
    (`FD_RESERVE`, `FDS_PER_REQUEST` per running request, and `other_connections`, another listener's) must fit;
    the soft limit is raised as far as the hard one allows, and max-connections lowered only when that is not
    enough."""
    reserve = FD_RESERVE + FDS_PER_REQUEST * max_concurrency + other_connections
    needed = max_connections + reserve
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft, max_connections
    new_soft = max(soft, needed if hard == resource.RLIM_INFINITY else min(needed, hard))
    return new_soft, max(1, min(max_connections, new_soft - reserve))


def fit_descriptors(max_connections: int, max_concurrency: int, other_connections: int = 0) -> int:
    """Check max-connections against RLIMIT_NOFILE at start-up (raising the soft limit when it is too low);
    returns the max-connections to serve with, said in one log line when lowered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft, connections = plan_descriptors(max_connections, max_concurrency, soft, hard, other_connections)
    if new_soft != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        _log.info("raised the open-files limit (RLIMIT_NOFILE) from %d to %d for max-connections", soft, new_soft)
    if connections < max_connections:
        _log.warning(
            "max-connections lowered from %d to %d: the open-files limit is %d (hard limit %s) and %d descriptors "
            "are kept for the server itself and its running requests",
            max_connections,
            connections,
            new_soft,
            "unlimited" if hard == resource.RLIM_INFINITY else hard,
            new_soft - connections,
        )
    return connections


# --- requests taken whole ---------------------------------------------------------------------------------------

# (status, reason) -> (content type, body): how an app's clients are told of a refusal.
Refusal = Callable[[int, str], tuple[bytes, bytes]]
# Before the body is read: (status, reason, extra headers) to refuse the request with, or None (e.g. API keys).
Gate = Callable[[Scope], tuple[int, str, list[tuple[bytes, bytes]]] | None]
_PHRASES = {400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 413: "Content Too Large"}


def text_refusal(status: int, reason: str) -> tuple[bytes, bytes]:
    return b"text/plain; charset=utf-8", (reason + "\n").encode()


class Guarded:
    """ASGI middleware for an app that takes a request's body whole (see the module's docstring)."""

    def __init__(self, app: AsgiApp, front: Front, refusal: Refusal = text_refusal, gate: Gate | None = None) -> None:
        self.app = app
        self.front = front
        self.refusal = refusal
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        names = {name.lower() for name, _ in scope["headers"]}
        if b"content-length" in names and b"transfer-encoding" in names:
            # Request smuggling surface (RFC 9112 §6.3): refused, and the connection closed, so nothing sent after
            # it is ever read as another request.
            await self.refuse(scope, send, 400, BOTH_FRAMINGS)
            return
        refused = self.gate(scope) if self.gate is not None else None
        if refused is not None:
            await self.refuse(scope, send, *refused)
            return
        body: bytes | int | None = None
        with anyio.move_on_after(self.front.body_timeout_s):
            body = await self._read_body(scope, receive)
        if body is None:
            await self.refuse(scope, send, 408, f"the request body did not arrive within {self.front.body_timeout_s} s")
            return
        if isinstance(body, int):  # over the limit (0: the client left)
            if body:
                front = self.front
                reason = f"the request body is over the limit of {front.max_body_bytes} bytes ({front.max_body_key})"
                await self.refuse(scope, send, 413, reason)
            return
        await self._serve(scope, receive, send, body)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | int:
        declared = dict(scope["headers"]).get(b"content-length", b"")
        return await read_body(receive, int(declared) if declared.isdigit() else None, self.front.max_body_bytes)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        gone = anyio.Event()
        scope = {**scope, CLIENT_GONE: gone, BODY_BYTES: len(body)}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def watch() -> None:
            # uvicorn answers `http.disconnect` once the client has gone (or the response is complete).
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        async with anyio.create_task_group() as watcher:
            watcher.start_soon(watch)
            try:
                await self.app(scope, replay, send)
            finally:
                watcher.cancel_scope.cancel()

    async def refuse(
        self, scope: Scope, send: Send, status: int, reason: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """Answer `status` with `reason` in the app's shape. A 400 (framing) or 408 closes the connection; after a
        413 or 401 the rest of the body is read and dropped (bounded by the header timeout, see `protocol`): a
        client still sending it would otherwise get a reset connection instead of the answer."""
        client = scope.get("client") or ("?",)
        _log.info("refused a request from %s: %d %s", client[0], status, reason)
        kind, body = self.refusal(status, reason)
        head = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *(headers or [])]
        if status in (400, 408):
            head.append((b"connection", b"close"))
        with contextlib.suppress(OSError):
            await send({"type": "http.response.start", "status": status, "headers": head})
            await send({"type": "http.response.body", "body": body, "more_body": False})


async def read_body(receive: Receive, declared: int | None, limit: int) -> bytes | int:
    """A request's whole body (`declared`: its Content-Length, if any); else, when it is over `limit`, its size as
    declared or as read so far (refused before reading a byte when the declared size is over), or 0 when the client
    left first. `serve`'s routes and `Guarded` read bodies with it."""
    if declared is not None and declared > limit:
        return declared
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return 0
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return size
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
