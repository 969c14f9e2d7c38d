"""Run the server: load every component, listen, serve until SIGINT/SIGTERM, shut down gracefully.

Why uvicorn: it is the most used ASGI server, maintained, and gives what this needs without our own HTTP code —
HTTP/1.1 keep-alive and chunked streaming with flow control (a `send` waits while the client is slow), prompt
disconnect notification (`http.disconnect`), and graceful shutdown (stop accepting, wait for in-flight requests
for a bounded time). h11, its pure-Python HTTP parser, is pinned so that behaviour does not depend on which
optional accelerator happens to be installed. The app is plain ASGI (no framework): routing, limits and
streaming are a few dozen lines that a framework would not save.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from llmhost import telemetry
from llmhost.api import Host
from llmhost.config import FakeEngineConfig, alias_map
from llmhost.domain.limits import SHUTDOWN_CANCEL_MARGIN_S
from llmhost.engine.observer import no_observers
from llmhost.engine.registry import Registry, create_registry
from llmhost.serve.app import ServeApp
from llmhost.serve.component import HttpComponent
from llmhost.serve.config import ServeSettings
from llmhost.serve.front import DescriptorWarnings as DescriptorWarnings
from llmhost.serve.front import bind as bind
from llmhost.serve.front import fit_descriptors, front_of, front_server
from llmhost.serve.front import plan_descriptors as plan_descriptors
from llmhost.serve.front import url_host as url_host
from llmhost.serve.metrics import ServeMetrics
from llmhost.serve.probes import ProbeListener, Readiness
from llmhost.serve.watch import Watcher

_log = logging.getLogger("llmhost.serve")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
T = TypeVar("T")


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # `--watch` logs what it rebuilds itself


def run(settings: ServeSettings, log_level: str = "info", watch: bool = False, preload: Sequence[str] = ()) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status (0 after a graceful shutdown). `watch`: rebuild and swap
    in a component when its guest directory changes (`serve.watch`). `preload`: local models (names or aliases,
    checked with `preload_problem`) loaded before the server listens and says it is ready; the others load at
    their first use."""
    configure_logging(log_level)
    readiness = Readiness()
    with observed_host(settings, readiness) as (host, engine, metrics):
        return _serve(settings, host, engine, readiness, metrics, watch, preload)


def watcher_for(
    settings: ServeSettings, world: str | None, load: Callable[[str, Path], T], swap: Callable[[str, T], None]
) -> Watcher[T]:
    """A `Watcher` of the components built from guest directories: each is rebuilt (for `world`, None: its own) as
    at start, loaded with `load` and put in service with `swap`. The data and cache directories, and the SQLite
    stores' files, are no sources even inside a guest directory."""
    from llmhost.toolchains.guest_dirs import build_guest

    roots = {name: c.source_dir for name, c in settings.components.items() if c.source_dir is not None}
    if not roots:
        _log.warning("--watch: no component is built from a guest directory; nothing to watch")
    config = settings.host
    note = lambda message: _log.info("%s", message)  # noqa: E731
    build = lambda name: build_guest(roots[name], world, config.cache_dir, note)  # noqa: E731
    stores = [store.path for store in config.key_value.values() if store.path is not None]
    ignore = [config.data_dir, config.cache_dir, *stores]
    current = {name: settings.components[name].source for name in roots}
    return Watcher(roots, build, load, swap, ignore, current)


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
        listener = ProbeListener(*settings.metrics_listen, metrics, readiness, front_of(settings))
        listener.start()
        shown_host, shown_port = listener.address
        _log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", url_host(shown_host), shown_port)
    note = lambda message: _log.info("%s", message)  # noqa: E731
    engine = create_registry(config, note, observers=metrics.observer if metrics is not None else no_observers)
    try:
        with Host(config, engine=engine, note=note) as host, telemetry.tracing(config.telemetry):
            yield host, engine, metrics
    finally:
        engine.close()
        if listener is not None:
            listener.stop()


def fit_connections(settings: ServeSettings) -> int:
    """`max-connections` for the apps' listener, fitted to the open-files limit (`front.fit_descriptors`); the
    metrics listener's connections are counted too."""
    metrics = settings.max_connections if settings.metrics_listen is not None else 0
    return fit_descriptors(settings.max_connections, settings.max_concurrency, metrics)


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
    components = {name: HttpComponent(host, component) for name, component in settings.components.items()}
    # Models load at their first use; `--preload` ones now, so that ready means their first request waits for no
    # load.
    _preload(settings, engine, readiness, preload)
    max_connections = fit_connections(settings)
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
