"""Joining the Ray cluster `[cluster] ray-address` names, within `connect-timeout-s`, or one line saying why not."""

from __future__ import annotations

import logging
import socket
import threading
from urllib.parse import urlsplit

from llmhost.config import ClusterConfig, ConfigError

RAY_CLIENT_PREFIX = "ray://"


def require_ray() -> None:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        raise ConfigError('backend = "ray" and `--ray` need Ray: pip install llmhost[ray]') from None


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
            ray.init(
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
