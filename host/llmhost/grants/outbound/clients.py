"""One outbound client per component, so that what one component's upstreams and lookups do stays in its own
exchanges: a connection an upstream left in a bad state (a 304 sent with a body) is reused by that component only,
and lookups that hang hold that component's DNS threads only. A component is its grants' config table (`sandbox`,
`components.NAME`): serve's and mcp's components each have their own client; `llmhost run` and the Python API's
apps, granted by `[sandbox]`, share one."""

from __future__ import annotations

import ssl
import threading
from typing import Unpack

from llmhost.domain.errors import ConnectionFailed
from llmhost.grants.outbound.client import ClientOptions, OutboundClient, tls_context


class OutboundClients:
    """The clients of a `Host`'s components, each created on first use and all closed by `close()`. `options`: as
    `OutboundClient` takes them (one TLS context serves all: it holds no connection)."""

    def __init__(self, **options: Unpack[ClientOptions]) -> None:
        self._options = options
        self._ssl_context: ssl.SSLContext | None = None  # loading the CAs takes a while: on first use
        self._lock = threading.Lock()
        self._clients: dict[str, OutboundClient] = {}
        self._closed = False

    def for_component(self, key: str) -> OutboundClient:
        """The client of the component whose grants come from config table `key`."""
        with self._lock:
            if self._closed:
                raise ConnectionFailed("the host is shutting down: no request can be sent now; nothing was sent")
            client = self._clients.get(key)
            if client is None:
                if self._ssl_context is None:
                    self._ssl_context = tls_context(self._options)
                client = OutboundClient(**(self._options | {"verify": self._ssl_context}))
                self._clients[key] = client
            return client

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
