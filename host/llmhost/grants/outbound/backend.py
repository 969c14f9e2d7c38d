"""httpcore's network layer for outbound requests: connect only to checked addresses, never wait past the deadline.

The client checks a request's host and the addresses it resolves to (`policy`), then sends it with a `Route`
set for the calling thread: `connect_tcp` connects to those addresses and nothing else (the name is not looked up
again, so a DNS answer that changes between the check and the connection changes nothing), and TLS is still
verified against the host name (httpcore passes the URL's host as the server name). Every read and write waits at
most until the route's deadline, so a server that trickles its body a byte at a time is cut off at the deadline,
not at a per-read timeout.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore


@dataclass(frozen=True)
class Route:
    """Where the current request may connect: its host and port as the pool names them, the addresses checked for
    them (in the order to try), and its deadline (`time.monotonic()`)."""

    host: str
    port: int
    addresses: tuple[str, ...]
    deadline: float

    def left(self) -> float:
        return self.deadline - time.monotonic()


ROUTE: contextvars.ContextVar[Route | None] = contextvars.ContextVar("llmhost_outbound_route", default=None)


class UncheckedConnection(httpcore.ConnectError):
    """A connection to a host and port no check allowed (a bug guard: the client always sets a route)."""


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` shortened to what is left before the current route's deadline; `error` once it has passed."""
    route = ROUTE.get()
    if route is None:
        return timeout
    left = route.left()
    if left <= 0:
        raise error("the deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads and writes never wait past the current request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout))
        return DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class CheckedBackend(httpcore.NetworkBackend):
    """Connects to the current route's checked addresses, in order, and refuses any other host or port."""

    def __init__(self) -> None:
        self._sync = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        route = ROUTE.get()
        if route is None or (host, port) != (route.host, route.port):
            raise UncheckedConnection(f"refused to connect to {host}:{port}: its addresses were not checked")
        failure: httpcore.ConnectError | None = None
        for address in route.addresses:
            try:
                stream = self._sync.connect_tcp(
                    address, port, _bounded(timeout, httpcore.ConnectTimeout), local_address, socket_options
                )
            except httpcore.ConnectError as error:  # refused or unreachable: the next address (IPv4 after IPv6...)
                failure = error
                continue
            return DeadlineStream(stream)
        assert failure is not None  # `policy.check_addresses` never passes an empty list
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise UncheckedConnection("outbound requests never use Unix sockets")

    def sleep(self, seconds: float) -> None:
        self._sync.sleep(seconds)
