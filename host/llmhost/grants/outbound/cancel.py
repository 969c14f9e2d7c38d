"""Stopping an outbound request from another thread, when its run is cancelled (a client that left, a server
stopping): the wait for DNS ends, and the socket the request is using is shut down, so that a blocked connect, TLS
handshake, read or write returns at once instead of at the deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
from concurrent.futures import Future

import httpcore


class Cancelled(httpcore.NetworkError):
    """Raised in the request's thread once it was cancelled (not a `ConnectError`: no other address is tried)."""


class Cancellation:
    """One request's cancellation: `cancel(reason)` from any thread (a `RunScope` calls it, as it does a
    generation's). The request's thread names the socket it uses (`watch`) and lets it go (`release`) before the
    socket is closed or goes back to the pool; both hold the lock `cancel` shuts a socket down under, so a socket
    is never shut down once released (its descriptor may belong to another connection by then)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.reason: str | None = None
        self.signal: Future[str] = Future()  # done once cancelled: what a DNS wait waits on beside the lookup

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            if self._socket is not None:
                _shut_down(self._socket)
        self.signal.set_result(reason)

    def watch(self, sock: socket.socket) -> None:
        """`sock` is the one the request waits on now; `Cancelled` if the request was cancelled already."""
        with self._lock:
            if self.reason is not None:
                raise Cancelled(self.reason)
            self._socket = sock

    def release(self, sock: socket.socket | None = None) -> None:
        """No socket is watched any more (`sock`: only if that one is)."""
        with self._lock:
            if sock is None or self._socket is sock:
                self._socket = None


def _shut_down(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for an SSLSocket: the kernel's socket only, never OpenSSL's state, which
    # the request's thread may be using. OSError: not connected yet, or closed (the request ends at its next check).
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
