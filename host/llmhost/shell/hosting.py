"""What both servers (`serve`, `mcp`) start the same way: logging, the host with its engine and metrics (and the
metrics listener), the `--watch` watcher of guest directories, and the connection limit fitted to the open-files
limit."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from llmhost import telemetry
from llmhost.api import Host
from llmhost.engine.observer import no_observers
from llmhost.engine.registry import Registry, create_registry
from llmhost.engine.status import model_statuses
from llmhost.shell.config import ServeSettings
from llmhost.shell.front import fit_descriptors, front_of, url_host
from llmhost.shell.metrics import ServeMetrics
from llmhost.shell.probes import ProbeListener, Readiness
from llmhost.shell.watch import Watcher

_log = logging.getLogger("llmhost.serve")  # the name the logs have always used
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
T = TypeVar("T")


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # `--watch` logs what it rebuilds itself


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
        _log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz, /models)", url_host(shown_host), shown_port)
    note = lambda message: _log.info("%s", message)  # noqa: E731
    engine = create_registry(config, note, observers=metrics.observer if metrics is not None else no_observers)
    readiness.models = lambda: model_statuses(engine)  # the listener's /models
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
