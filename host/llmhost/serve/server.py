"""Run the server: load every component, listen, serve until SIGINT/SIGTERM, shut down gracefully.

Why uvicorn: it is the most used ASGI server, maintained, and gives what this needs without our own HTTP code —
HTTP/1.1 keep-alive and chunked streaming with flow control (a `send` waits while the client is slow), prompt
disconnect notification (`http.disconnect`), and graceful shutdown (stop accepting, wait for in-flight requests
for a bounded time). h11, its pure-Python HTTP parser, is pinned so that behaviour does not depend on which
optional accelerator happens to be installed. The app is plain ASGI (no framework): routing, limits and
streaming are a few dozen lines that a framework would not save.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from llmhost.api import Host
from llmhost.config import FakeEngineConfig, alias_map
from llmhost.domain.limits import SHUTDOWN_CANCEL_MARGIN_S
from llmhost.engine.registry import Registry
from llmhost.serve.app import ServeApp
from llmhost.serve.component import HttpComponent
from llmhost.shell.config import ServeSettings
from llmhost.shell.front import bind, front_of, front_server, url_host
from llmhost.shell.hosting import configure_logging, fit_connections, observed_host, watcher_for
from llmhost.shell.metrics import RequestObserver, ServeMetrics
from llmhost.shell.probes import Readiness

_log = logging.getLogger("llmhost.serve")


def run(settings: ServeSettings, log_level: str = "info", watch: bool = False, preload: Sequence[str] = ()) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status (0 after a graceful shutdown). `watch`: rebuild and swap
    in a component when its guest directory changes (`shell.watch`). `preload`: local models (names or aliases,
    checked with `preload_problem`) loaded before the server listens and says it is ready; the others load at
    their first use."""
    configure_logging(log_level)
    readiness = Readiness()
    with observed_host(settings, readiness) as (host, engine, metrics):
        return _serve(settings, host, engine, readiness, metrics, watch, preload)


def preload_problem(settings: ServeSettings, names: Sequence[str]) -> str | None:
    """Why `serve --preload NAME` cannot preload one of `names` (None: each is a configured local model or an
    alias of one)."""
    models = settings.host.models
    aliases = alias_map(models)
    for name in names:
        model = models.get(aliases.get(name, name))
        if model is None:
            return f"{name!r} is not a configured model (known: {', '.join(models)})"
        if model.backend != "llama-cpp":
            return f"{name!r} is not loaded in this process (backend {model.backend!r}): only local models preload"
        if isinstance(settings.host.engine, FakeEngineConfig):
            return f'{name!r}: the fake engine (`[engine] kind = "fake"`) loads no models'
    return None


def _preload(settings: ServeSettings, engine: Registry, readiness: Readiness, names: Sequence[str]) -> None:
    """Load the `--preload` models (in order; /readyz names them while they load). A preloaded model no routed
    component may use is loaded all the same, with a warning."""
    wanted = list(dict.fromkeys(engine.canonical(name) for name in names))
    unused = [name for name in wanted if name not in needed_models(settings)]
    if unused:
        _log.warning("--preload %s: no routed component may use it", ", ".join(unused))
    readiness.loading = wanted
    for model in wanted:
        started = time.monotonic()
        engine.engine(model).model_info(model)  # loads it (then idle: its keep-alive starts)
        _log.info("preloaded %s in %.1f s", model, time.monotonic() - started)
        readiness.loading = readiness.loading[1:]


def needed_models(settings: ServeSettings) -> list[str]:
    """The local models the routed components may use (every configured one for a component without
    `allowed-models`), in config order."""
    needed: set[str] = set()
    for name in settings.routes.values():
        allowed = settings.components[name].allowed_models
        needed.update(allowed if allowed is not None else settings.host.models)
    return [m for m, c in settings.host.models.items() if m in needed and c.backend == "llama-cpp"]


def serve_app(
    host: Host, settings: ServeSettings, observer: RequestObserver | None
) -> tuple[ServeApp, Callable[[], None]]:
    """The app serving `settings`' routes on request threads of its own (`llmhost serve`, and each Ray replica),
    every component loaded (and on first use compiled) now; and its stop: running guests are cancelled, queued
    requests dropped."""
    components = {name: HttpComponent(host, component) for name, component in settings.components.items()}
    executor = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="llmhost-request")
    app = ServeApp(
        components,
        settings.routes,
        executor,
        settings.body_timeout_s,
        settings.max_log_bytes,
        settings.api_keys,
        observer=observer,
    )

    def stop() -> None:
        app.cancel_all("the server is shutting down")
        executor.shutdown(wait=False, cancel_futures=True)

    return app, stop


def _serve(
    settings: ServeSettings,
    host: Host,
    engine: Registry,
    readiness: Readiness,
    metrics: ServeMetrics | None = None,
    watch: bool = False,
    preload: Sequence[str] = (),
) -> int:
    # Load (and on first use compile) every component before listening: a request never waits for a compile.
    app, stop_app = serve_app(host, settings, metrics)
    # Models load at their first use; `--preload` ones now, so that ready means their first request waits for no
    # load.
    _preload(settings, engine, readiness, preload)
    max_connections = fit_connections(settings)
    sock = bind(*settings.listen)
    watcher = None
    if watch:
        load = lambda name, path: HttpComponent(host, replace(settings.components[name], source=path))  # noqa: E731
        watcher = watcher_for(settings, "http-app", load, app.swap)
    host_name, port = sock.getsockname()[:2]
    engine_kind = "fake engine" if isinstance(settings.host.engine, FakeEngineConfig) else "llama.cpp"
    routes = ", ".join(f"{prefix} -> {name}" for prefix, name in settings.routes.items())

    def started() -> None:
        _log.info("listening on http://%s:%d (%s; routes: %s)", url_host(host_name), port, engine_kind, routes)
        readiness.ready = True
        if watcher is not None:
            watcher.start()

    def begin_shutdown() -> None:
        readiness.ready = False  # /readyz: 503 from now on, so load balancers stop sending traffic
        if watcher is not None:
            watcher.stop()
        # Requests still running near the end of the grace are cancelled (their generations end at once, so a
        # guest ends its response itself: a stream's last event), leaving the margin for them to do so.
        delay = max(0.0, settings.shutdown_grace_s - SHUTDOWN_CANCEL_MARGIN_S)
        timer = threading.Timer(delay, app.cancel_all, args=("the server is shutting down",))
        timer.daemon = True
        timer.start()

    server = front_server(app, front_of(settings), max_connections, started, begin_shutdown)
    try:
        server.run(sockets=[sock])
    finally:
        stop_app()
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
