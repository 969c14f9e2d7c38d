"""The outbound HTTP client: sends what `policy` allows, through httpx, to the addresses it checked.

One client per `Host` (connections are pooled across its runs). For each request, and again for each redirect:
the URL must match a grant (`denied`), the host is resolved once and every address checked (`denied`), a request
is counted against the run's `max-outbound-requests`, and it is sent to a checked address (`backend`), with TLS
verified against the host name. The body is read as it arrives and the read stops past `max-response-bytes`
(`too-large`). One deadline bounds the whole exchange, DNS and redirects included: the guest's `timeout-ms`, the
run's time left or `OUTBOUND_TIMEOUT_S`, whichever ends first (`timeout`).
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import httpcore
import httpx

from llmhost.domain.errors import ConnectionFailed, InvalidRequest, OutboundDenied, OutboundTimeout, TooLarge
from llmhost.domain.hosts import AllowedHost
from llmhost.domain.limits import MAX_REDIRECTS, OUTBOUND_TIMEOUT_S
from llmhost.grants.deadline import before_deadline
from llmhost.grants.outbound.backend import ROUTE, CheckedBackend, Route
from llmhost.grants.outbound.messages import Fields, OutboundRequest, OutboundResponse
from llmhost.grants.outbound.policy import (
    REDIRECT_STATUSES,
    Hop,
    RequestBudget,
    Target,
    authorize,
    check_addresses,
    check_headers,
    check_method,
    parse_target,
    redirect,
)

# `resolver(host, port)`: the addresses of a host name, as text, in the order to try them (tests fake DNS with it).
Resolver = Callable[[str, int], Sequence[str]]
# Headers every request carries unless the guest sets its own: the body comes back as the server sent it, so the
# host never inflates a compressed body (whose size `max-response-bytes` could not bound before inflating it).
DEFAULT_HEADERS = {"user-agent": "llmhost", "accept-encoding": "identity", "accept": "*/*"}
READ_CHUNK = 64 * 1024


class _Unlogged(logging.Filter):
    """httpx logs each request's URL at INFO and httpcore its exchanges at DEBUG; a guest's URL or headers may carry
    a config value taken from the environment (a token in a query), which must never reach a log. Records made
    while an outbound exchange runs on this thread (its `ROUTE` set) are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return ROUTE.get() is None


_UNLOGGED = _Unlogged()
for _name in ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy"):
    logging.getLogger(_name).addFilter(_UNLOGGED)


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class OutboundClient:
    """`verify`: how TLS certificates are checked (True: the system's CAs via certifi, as httpx does; tests pass a
    context trusting their own CA). `resolver`: DNS (tests fake it). `timeout_s`: the longest any request waits."""

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout_s: float = OUTBOUND_TIMEOUT_S,
    ) -> None:
        self._resolver = resolver or system_resolver
        self.timeout_s = timeout_s
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=False)
        transport = httpx.HTTPTransport(verify=ssl_context, trust_env=False)
        # httpx takes no network backend: its pool is replaced by one that connects only through `CheckedBackend`.
        # Refuse to run if httpx has moved it, rather than send through a pool that does its own DNS.
        if not isinstance(getattr(transport, "_pool", None), httpcore.ConnectionPool):
            raise RuntimeError("httpx's HTTPTransport has no `_pool`: the outbound client needs updating")
        transport._pool.close()
        transport._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, max_connections=100, max_keepalive_connections=20, network_backend=CheckedBackend()
        )
        # No proxies or .netrc from the host's environment (trust_env): a proxy would do its own DNS and reach
        # whatever it likes; redirects are followed here, each checked.
        self._http = httpx.Client(
            transport=transport, trust_env=False, follow_redirects=False, headers=DEFAULT_HEADERS, timeout=None
        )
        # getaddrinfo cannot be given a timeout: it runs on these threads, and the request stops waiting for it.
        self._dns = ThreadPoolExecutor(max_workers=4, thread_name_prefix="llmhost-dns")

    def close(self) -> None:
        self._http.close()
        self._dns.shutdown(wait=False, cancel_futures=True)

    def send(
        self,
        request: OutboundRequest,
        allowed_hosts: tuple[AllowedHost, ...],
        key: str,
        *,
        max_response_bytes: int,
        budget: RequestBudget | None = None,
        time_left: float | None = None,
    ) -> OutboundResponse:
        """Send `request` as the grants of config table `key` allow, following redirects; the whole response.
        `time_left`: seconds before the run's deadline (None: none). Raises the `LlmError` of each WIT error case."""
        if not allowed_hosts:  # nothing granted: denied whatever the request, before it is even read
            raise OutboundDenied(
                f"no outbound host is granted to this component (`{key}.allowed-outbound-hosts`); nothing was sent"
            )
        method = check_method(request.method)
        headers = check_headers(request.headers)
        hop = Hop(parse_target(request.url), method, request.body, headers)
        seconds, why = self._timeout(request, time_left)
        deadline = time.monotonic() + seconds
        for redirects in range(MAX_REDIRECTS + 1):
            grant = authorize(allowed_hosts, hop.target, key)
            addresses = check_addresses(grant, hop.target, self._resolve(hop.target, deadline, why))
            if budget is not None:
                budget.take()
            status, fields, body = self._exchange(hop, addresses, deadline, why, max_response_bytes, key)
            location = _header(fields, "location")
            if body is not None or location is None:
                return OutboundResponse(status, fields, body or b"")
            if redirects == MAX_REDIRECTS:
                raise TooLarge(
                    f"{hop.target.origin} redirected again after {MAX_REDIRECTS} redirects (to {location[:200]!r}): "
                    "a redirect loop, or too many redirects; not followed"
                )
            previous = hop.target.origin
            hop = redirect(hop.target, hop.method, hop.body, hop.headers, status, location)
            try:
                authorize(allowed_hosts, hop.target, key)
            except OutboundDenied as error:
                raise OutboundDenied(f"{previous} redirected to a host that is not granted: {error.message}") from None
        raise AssertionError("unreachable")

    def _timeout(self, request: OutboundRequest, time_left: float | None) -> tuple[float, str]:
        """The request's total time, and what sets it (named in a timeout's message)."""
        limits = [(self.timeout_s, f"the host's outbound timeout of {self.timeout_s:g} s")]
        if request.timeout_s is not None:
            limits.append((request.timeout_s, f"the request's timeout-ms of {request.timeout_s * 1000:.0f}"))
        if time_left is not None:  # ends a little before the deadline: the guest must still run to handle it
            limits.append((before_deadline(time_left), f"the run's deadline, {max(0.0, time_left):.3g} s away"))
        seconds, why = min(limits, key=lambda limit: limit[0])
        if seconds <= 0:
            raise OutboundTimeout(f"no time is left for the request ({why}); nothing was sent")
        return seconds, why

    def _resolve(self, target: Target, deadline: float, why: str) -> tuple[str, ...]:
        fixed = target.fixed_addresses()
        if fixed is not None:
            return fixed
        future = self._dns.submit(self._resolver, target.connect_host, target.port)
        try:
            return tuple(future.result(timeout=max(0.0, deadline - time.monotonic())))
        except FutureTimeout:
            raise OutboundTimeout(f"resolving {target.host} did not finish within {why}") from None
        except OSError as error:
            raise ConnectionFailed(f"cannot resolve {target.host}: {error}") from None

    def _exchange(
        self, hop: Hop, addresses: tuple[str, ...], deadline: float, why: str, max_bytes: int, key: str
    ) -> tuple[int, Fields, bytes | None]:
        """One request and its response: (status, headers, body), the body None for a redirect to follow."""
        origin = hop.target.origin
        token = ROUTE.set(Route(hop.target.connect_host, hop.target.port, addresses, deadline))
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise httpx.ConnectTimeout("the deadline passed")
            # Values as UTF-8 (httpx would encode text as ASCII and raise); names are tokens, ASCII already.
            headers = [(name.encode("ascii"), value.encode("utf-8")) for name, value in hop.headers]
            request = self._http.build_request(
                hop.method, hop.target.url, headers=headers, content=hop.body, timeout=httpx.Timeout(left)
            )
            response = self._http.send(request, stream=True)
            try:
                fields = tuple((name.decode("latin-1").lower(), _text(value)) for name, value in response.headers.raw)
                if response.status_code in REDIRECT_STATUSES and _header(fields, "location") is not None:
                    return response.status_code, fields, None  # followed: its body is not read
                return response.status_code, fields, _read_body(response, origin, max_bytes, key)
            finally:
                response.close()
        except httpx.TimeoutException:
            raise OutboundTimeout(f"no whole response from {origin} within {why}") from None
        except httpx.LocalProtocolError as error:
            raise InvalidRequest(f"the request to {origin} cannot be sent: {error}") from None
        except httpx.RemoteProtocolError as error:
            raise ConnectionFailed(f"{origin} sent a malformed response, or closed the connection: {error}") from None
        except httpx.TransportError as error:
            raise ConnectionFailed(f"connecting to {origin} failed: {error or type(error).__name__}") from None
        finally:
            ROUTE.reset(token)


def _read_body(response: httpx.Response, origin: str, max_bytes: int, key: str) -> bytes:
    """The body, read as it arrives; `TooLarge` as soon as it is known to exceed `max_bytes` (not read further)."""
    too_large = (
        f"the response from {origin} is larger than {max_bytes} bytes (`{key}.max-response-bytes`); it was not read "
        "further"
    )
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise TooLarge(too_large)
    body = bytearray()
    for chunk in response.iter_raw(READ_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(too_large)
    return bytes(body)


def _header(fields: Fields, name: str) -> str | None:
    return next((value for key, value in fields if key == name), None)


def _text(value: bytes) -> str:
    """A header value as text: UTF-8 when it is, else Latin-1 (what HTTP/1.1 historically allowed)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")
