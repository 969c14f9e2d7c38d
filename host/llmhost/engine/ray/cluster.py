"""Joining the Ray cluster `[cluster] ray-address` names, within `connect-timeout-s`, or one line saying why not."""

from __future__ import annotations

import faulthandler
import logging
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from llmhost.config import ClusterConfig, ConfigError

RAY_CLIENT_PREFIX = "ray://"


def require_ray() -> None:
    # Wasmtime's traps are signals (SIGILL, SIGSEGV, SIGFPE) its own handlers turn into a guest's trap. Ray's crash
    # handler (absl's, installed by ray.init unless this is set; read when Ray is imported) would take them first
    # and kill the host at a guest's first trap.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        raise ConfigError('backend = "ray" and `--ray` need Ray: pip install llmhost[ray]') from None


def init_ray(**kwargs: Any) -> None:
    """`ray.init(**kwargs)`, leaving the process's fatal-signal handlers as they were: ray.init turns Python's
    faulthandler on, on top of wasmtime's handlers, which would make a guest's trap kill the host."""
    require_ray()
    import ray

    was_enabled = faulthandler.is_enabled()
    ray.init(**kwargs)
    if not was_enabled and faulthandler.is_enabled():
        faulthandler.disable()  # restores the handlers it replaced (wasmtime's)


def _endpoint(address: str) -> tuple[str, int] | None:
    """HOST:PORT of a GCS or Ray Client address; None for "auto" (Ray finds the local cluster itself)."""
    if address == "auto":
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if parts.hostname is None or parts.port is None:
        raise ConfigError(f'[cluster] ray-address {address!r} is not "auto", "HOST:PORT" or "ray://HOST:10001"')
    return parts.hostname, parts.port


def _quiet_sigterm_note(record: logging.LogRecord) -> bool:
    return "SIGTERM handler is not set" not in record.getMessage()


def connect(cluster: ClusterConfig) -> None:
    """Join the cluster as a driver (once per process). A refused or silent address fails within the timeout."""
    require_ray()
    import ray

    if ray.is_initialized():
        return
    address = cluster.ray_address or "auto"
    timeout = cluster.connect_timeout_s
    endpoint = _endpoint(address)
    if endpoint is not None:
        try:
            socket.create_connection(endpoint, timeout=timeout).close()
        except OSError as e:
            raise ConfigError(
                f"[cluster] ray-address {address!r}: no Ray cluster answers there ({e.strerror or e}); start one "
                "(`ray start --head`) or fix the address"
            ) from None
    failure: list[BaseException] = []

    def join() -> None:
        try:
            init_ray(
                address=address,
                namespace="llmhost",
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=False,
            )
        except BaseException as e:  # noqa: BLE001 (reported below, as one line)
            failure.append(e)

    # ray.init retries a silent GCS for a long time: wait for it in a thread, at most the timeout. (Off the main
    # thread, Ray leaves SIGTERM alone, which is what a host wants: it handles its signals itself.)
    logging.getLogger("ray._private.worker").addFilter(_quiet_sigterm_note)
    # Serve's INFO lines ("Application ... is ready", its router's start) would be mixed into a CLI's output.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    joining = threading.Thread(target=join, name="llmhost-ray-connect", daemon=True)
    joining.start()
    joining.join(timeout)
    if joining.is_alive():
        raise ConfigError(f"[cluster] ray-address {address!r}: the Ray cluster did not answer within {timeout:g} s")
    if failure:
        reason = str(failure[0]).strip().splitlines()
        raise ConfigError(f"[cluster] ray-address {address!r}: {reason[0] if reason else type(failure[0]).__name__}")
