"""What an app config asks of Ray Serve: the ingress deployment's options, and what it may not do with several
replicas (state in a file of one node)."""

from __future__ import annotations

from typing import Any

from llmhost.config import ConfigError
from llmhost.domain.limits import DEFAULT_STORE
from llmhost.shell.config import AppConfig, ServeSettings

APP_NAME = "llmhost-app"  # the Serve application's name unless given (Serve's `serve.delete("llmhost-app")` removes it)
DEPLOYMENT = "llmhost-ingress"
ROUTE_PREFIX = "/"  # the app config's `[routes]` route below it, as under `llmhost serve`
REPLICA_HEADER = b"x-llmhost-replica"  # every response names the replica that served it (logs, load tests)
# A replica that stops answering Serve's health check is replaced (Ray's defaults: every 10 s, 30 s timeout).
HEALTH_CHECK_PERIOD_S = 2.0
HEALTH_CHECK_TIMEOUT_S = 10.0
# Serve's own log line per request would double llmhost's: warnings only.
INGRESS_LOGGING = {"log_level": "WARNING", "enable_access_log": False}


def check_shared_state(config: AppConfig, origin: str) -> None:
    """Several replicas share key-value state only through Redis: a SQLite store (a file on one node, the implicit
    `default` included) granted to a component is refused with `[serve] replicas` > 1."""
    if config.serve.replicas <= 1:
        return
    for name, component in config.components.items():
        for store in component.key_value_stores:
            declared = config.key_value.get(store)
            if (declared is None and store == DEFAULT_STORE) or (declared is not None and declared.backend == "sqlite"):
                raise ConfigError(
                    f"{origin}: `components.{name}.key-value-stores`: store {store!r} is SQLite, a file on one node, "
                    f'and `serve.replicas` is {config.serve.replicas}: give `[key-value.{store}]` backend = "redis" '
                    "(a url every replica reaches), or set `serve.replicas = 1`"
                )


def ingress_options(config: AppConfig, settings: ServeSettings) -> dict[str, Any]:
    """`[serve]` and the server keys as Serve deployment options. Serve places replicas with its SPREAD strategy
    (one per node while nodes are free); with `metrics-listen` each replica listens on that port, so a node holds at
    most one."""
    options: dict[str, Any] = {
        "name": DEPLOYMENT,
        "num_replicas": config.serve.replicas,
        "ray_actor_options": {"num_cpus": config.serve.replica_cpus},
        # Streams stay open for a generation's length: a replica takes as many requests as `llmhost serve` takes
        # connections; at most `max-concurrency` guests run, the rest wait for one within their deadline.
        "max_ongoing_requests": settings.max_connections,
        "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        "health_check_timeout_s": HEALTH_CHECK_TIMEOUT_S,
        "graceful_shutdown_timeout_s": settings.shutdown_grace_s,
        "logging_config": INGRESS_LOGGING,
    }
    if settings.metrics_listen is not None:
        options["max_replicas_per_node"] = 1
    return options
