"""httpcore's network layer for outbound requests: connect only to checked addresses, never wait past the deadline.

The client checks a request's host and the addresses it resolves to (`policy`), then sends it with a `Route`
set for the calling thread: `connect_tcp` connects to those addresses and nothing else (the name is not looked up
again, so a DNS answer that changes between the check and the connection changes nothing), and TLS is still
verified against the host name (httpcore passes the URL's host as the server name). Every read and write waits at
most until the route's deadline, so a server that trickles its body a byte at a time is cut off at the deadline,
not at a per-read timeout. The route's `Cancellation` is told which socket the request waits on, so that cancelling
the run shuts it down (a connect, handshake, read or write in progress returns at once): this backend opens the
sockets and starts TLS itself (as httpcore's `SyncBackend` does) so that it holds each one before it is waited on.
"""

from __future__ import annotations

import contextvars
import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
from httpcore._backends.sync import SyncStream  # httpcore's stream over a socket (reads, writes, TLS-in-TLS)

from llmhost.grants.outbound.cancel import Cancellation


@dataclass(frozen=True)
class Route:
    """Where the current request may connect: its host and port as the pool names them, the addresses checked for
    them (in the order to try), its deadline (`time.monotonic()`) and its cancellation."""

    host: str
    port: int
    addresses: tuple[str, ...]
    deadline: float
    cancellation: Cancellation

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


def _watched(sock: socket.socket) -> None:
    """Tell the current request's cancellation that it now waits on `sock` (`Cancelled` if it was cancelled)."""
    route = ROUTE.get()
    if route is not None:
        route.cancellation.watch(sock)


def _released(sock: socket.socket) -> None:
    route = ROUTE.get()
    if route is not None:
        route.cancellation.release(sock)


@contextmanager
def _connect_errors(sock: socket.socket) -> Iterator[None]:
    """httpcore's errors for a connect or a TLS handshake (as `SyncBackend` maps them); `sock` closed on failure."""
    try:
        yield
    except BaseException as error:
        _released(sock)
        sock.close()
        if isinstance(error, socket.timeout):
            raise httpcore.ConnectTimeout(str(error)) from None
        if isinstance(error, OSError):
            raise httpcore.ConnectError(str(error)) from None
        raise


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads and writes never wait past the current request's deadline, and that the current
    request's cancellation can shut down."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._inner = SyncStream(sock)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        _watched(self._socket)  # a kept-alive connection serves another request than the one that opened it
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _watched(self._socket)
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        _released(self._socket)  # before its descriptor is freed for another connection to take
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        # As SyncStream.start_tls, but the handshake waits on a socket the cancellation holds.
        with _connect_errors(self._socket):
            self._socket.settimeout(_bounded(timeout, httpcore.ConnectTimeout))
            tls = ssl_context.wrap_socket(self._socket, server_hostname=server_hostname, do_handshake_on_connect=False)
        with _connect_errors(tls):
            _watched(tls)
            tls.do_handshake()
        return DeadlineStream(tls)

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
                sock = _connect(address, port, _bounded(timeout, httpcore.ConnectTimeout), local_address)
            except httpcore.ConnectError as error:  # refused or unreachable: the next address (IPv4 after IPv6...)
                failure = error
                continue
            with _connect_errors(sock):
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return DeadlineStream(sock)
        assert failure is not None  # `policy.check_addresses` never passes an empty list
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise UncheckedConnection("outbound requests never use Unix sockets")

    def sleep(self, seconds: float) -> None:
        self._sync.sleep(seconds)


def _connect(address: str, port: int, timeout: float | None, local_address: str | None) -> socket.socket:
    """A socket connected to `address` (an IP address: no lookup), held by the current request's cancellation while
    it connects (a shutdown ends a connect in progress)."""
    try:
        family, kind, protocol, _, where = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )[0]
    except OSError as error:
        raise httpcore.ConnectError(str(error)) from None
    sock = socket.socket(family, kind, protocol)
    with _connect_errors(sock):
        _watched(sock)
        sock.settimeout(timeout)
        if local_address is not None:
            sock.bind((local_address, 0))
        sock.connect(where)
        _watched(sock)  # a cancel that came before the connect started could not shut it down
    return sock
