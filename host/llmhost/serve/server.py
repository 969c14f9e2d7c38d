"""Run the server: load every component, listen, serve until SIGINT/SIGTERM, shut down gracefully.

Why uvicorn: it is the most used ASGI server, maintained, and gives what this needs without our own HTTP code —
HTTP/1.1 keep-alive and chunked streaming with flow control (a `send` waits while the client is slow), prompt
disconnect notification (`http.disconnect`), and graceful shutdown (stop accepting, wait for in-flight requests
for a bounded time). h11, its pure-Python HTTP parser, is pinned so that behaviour does not depend on which
optional accelerator happens to be installed. The app is plain ASGI (no framework): routing, limits and
streaming are a few dozen lines that a framework would not save.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvicorn

from llmhost.api import Host
from llmhost.config import FakeEngineConfig
from llmhost.domain.limits import FD_RESERVE, FD_WARNING_INTERVAL_S, FDS_PER_REQUEST, SHUTDOWN_CANCEL_MARGIN_S
from llmhost.engine.observer import no_observers
from llmhost.engine.registry import Registry, create_registry
from llmhost.serve.app import ServeApp
from llmhost.serve.component import HttpComponent
from llmhost.serve.config import ServeSettings
from llmhost.serve.metrics import ServeMetrics
from llmhost.serve.probes import ProbeListener, Readiness
from llmhost.serve.protocol import protocol_with_header_timeout

_log = logging.getLogger("llmhost.serve")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Server(uvicorn.Server):
    """uvicorn's server with our own signal handling: on SIGINT/SIGTERM it stops accepting and lets in-flight
    requests finish (bounded by `timeout_graceful_shutdown`), and the process then exits 0 — uvicorn's own
    handler re-raises the signal after shutting down, which would end the process with the signal's status."""

    def __init__(
        self, config: uvicorn.Config, on_started: Callable[[], None], on_shutdown: Callable[[], None] = lambda: None
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


def plan_descriptors(max_connections: int, max_concurrency: int, soft: int, hard: int) -> tuple[int, int]:
    """The soft RLIMIT_NOFILE to set and the max-connections to serve with: connections plus the reserve
    (`FD_RESERVE`, `FDS_PER_REQUEST` per running request) must fit; the soft limit is raised as far as the
    hard one allows, and max-connections lowered only when that is not enough."""
    reserve = FD_RESERVE + FDS_PER_REQUEST * max_concurrency
    needed = max_connections + reserve
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft, max_connections
    new_soft = max(soft, needed if hard == resource.RLIM_INFINITY else min(needed, hard))
    return new_soft, max(1, min(max_connections, new_soft - reserve))


def fit_descriptors(max_connections: int, max_concurrency: int) -> int:
    """Check max-connections against RLIMIT_NOFILE at start-up (raising the soft limit when it is too low);
    returns the max-connections to serve with, said in one log line when lowered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft, connections = plan_descriptors(max_connections, max_concurrency, soft, hard)
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


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def url_host(host: str) -> str:
    """A listening address's host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.set_inheritable(True)
    return sock


def run(settings: ServeSettings, log_level: str = "info") -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status (0 after a graceful shutdown)."""
    configure_logging(log_level)
    readiness = Readiness()
    with observed_host(settings, readiness) as (host, engine, metrics):
        return _serve(settings, host, engine, readiness, metrics)


@contextlib.contextmanager
def observed_host(
    settings: ServeSettings, readiness: Readiness
) -> Iterator[tuple[Host, Registry, ServeMetrics | None]]:
    """The host of a server (`serve`, `mcp`), its engine, and with `metrics-listen` its metrics and their listener
    (started first, so that /healthz and /readyz (503) answer while components compile and models load)."""
    config = settings.host
    metrics = listener = None
    if settings.metrics_listen is not None:
        metrics = ServeMetrics(settings.components, config.models)
        listener = ProbeListener(*settings.metrics_listen, metrics, readiness)
        listener.start()
        shown_host, shown_port = listener.address
        _log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", url_host(shown_host), shown_port)
    note = lambda message: _log.info("%s", message)  # noqa: E731
    engine = create_registry(config, note, observers=metrics.observer if metrics is not None else no_observers)
    try:
        with Host(config, engine=engine, note=note) as host:
            yield host, engine, metrics
    finally:
        engine.close()
        if listener is not None:
            listener.stop()


def needed_models(settings: ServeSettings) -> list[str]:
    """The local models the routed components may use (every configured one for a component without
    `allowed-models`), in config order: loaded before a server with a metrics listener says it is ready."""
    needed: set[str] = set()
    for name in settings.routes.values():
        allowed = settings.components[name].allowed_models
        needed.update(allowed if allowed is not None else settings.host.models)
    return [m for m, c in settings.host.models.items() if m in needed and c.backend == "llama-cpp"]


def _serve(
    settings: ServeSettings,
    host: Host,
    engine: Registry,
    readiness: Readiness,
    metrics: ServeMetrics | None = None,
) -> int:
    # Load (and on first use compile) every component before listening: a request never waits for a compile.
    components = {name: HttpComponent(host, component) for name, component in settings.components.items()}
    if metrics is not None:
        # Ready means the first request waits for no model load either (without a metrics listener nobody asks,
        # and models load on first use).
        for model in needed_models(settings):
            engine.engine(model).model_info(model)
    max_connections = fit_descriptors(settings.max_connections, settings.max_concurrency)
    sock = bind(*settings.listen)
    executor = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="llmhost-request")
    app = ServeApp(
        components,
        settings.routes,
        executor,
        settings.body_timeout_s,
        settings.max_log_bytes,
        settings.api_keys,
        observer=metrics,
    )
    uvicorn_config = uvicorn.Config(
        app,
        http=protocol_with_header_timeout(
            settings.header_timeout_s, max(c.limits.max_body_bytes for c in settings.components.values())
        ),
        # Connections at once, idle keep-alive ones included: more are answered 503 (and slow-loris ones are
        # closed by the header timeout, so they cannot hold the places for long).
        limit_concurrency=max_connections,
        loop="asyncio",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,  # ServeApp logs one line per request itself, with status, duration and tokens
        timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
    )
    host_name, port = sock.getsockname()[:2]
    engine_kind = "fake engine" if isinstance(settings.host.engine, FakeEngineConfig) else "llama.cpp"
    routes = ", ".join(f"{prefix} -> {name}" for prefix, name in settings.routes.items())

    def started() -> None:
        _log.info("listening on http://%s:%d (%s; routes: %s)", url_host(host_name), port, engine_kind, routes)
        readiness.ready = True

    def begin_shutdown() -> None:
        readiness.ready = False  # /readyz: 503 from now on, so load balancers stop sending traffic
        # Requests still running near the end of the grace are cancelled (their generations end at once, so a
        # guest ends its response itself: a stream's last event), leaving the margin for them to do so.
        delay = max(0.0, settings.shutdown_grace_s - SHUTDOWN_CANCEL_MARGIN_S)
        timer = threading.Timer(delay, app.cancel_all, args=("the server is shutting down",))
        timer.daemon = True
        timer.start()

    server = _Server(uvicorn_config, started, begin_shutdown)
    try:
        server.run(sockets=[sock])
    finally:
        app.cancel_all("the server is shutting down")
        executor.shutdown(wait=False, cancel_futures=True)
        sock.close()
    stuck = app.running()
    if stuck:
        # A guest computing without calling the host cannot be stopped from outside before its own deadline;
        # the process does not wait for it past the grace.
        _log.warning("stopped with %d guest(s) still running; they are abandoned", stuck)
        logging.shutdown()
        os._exit(0)
    _log.info("stopped")
    return 0
