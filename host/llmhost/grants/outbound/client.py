"""The outbound HTTP client: sends what `policy` allows, through httpx, to the addresses it checked.

One client per component (`clients.OutboundClients`): its connections are pooled across its runs, never shared with
another component, and it keeps no cookies. For each request, and again for each redirect:
the URL must match a grant (`denied`), the host is resolved once and every address checked (`denied`), a request
is counted against the run's `max-outbound-requests`, and it is sent to a checked address (`backend`), with TLS
verified against the host name. The body is read as it arrives and the read stops past `max-response-bytes`
(`too-large`). One deadline bounds the whole exchange, DNS and redirects included: the guest's `timeout-ms`, the
run's time left or `OUTBOUND_TIMEOUT_S`, whichever ends first (`timeout`). Cancelling the request's `Cancellation`
(its run was cancelled) stops it at once, wherever it waits. Messages quote URLs without their query or credentials.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, TypedDict, Unpack

import httpcore
import httpx

from llmhost import telemetry
from llmhost.domain.errors import ConnectionFailed, InvalidRequest, OutboundDenied, OutboundTimeout, TooLarge
from llmhost.domain.hosts import AllowedHost
from llmhost.domain.limits import (
    MAX_OUTBOUND_BODY_BYTES,
    MAX_REDIRECTS,
    OUTBOUND_DNS_THREADS,
    OUTBOUND_KEEPALIVE_CONNECTIONS,
    OUTBOUND_MAX_CONNECTIONS,
    OUTBOUND_TIMEOUT_S,
)
from llmhost.domain.redaction import redact_url
from llmhost.grants.deadline import before_deadline
from llmhost.grants.outbound.backend import ROUTE, CheckedBackend, Route
from llmhost.grants.outbound.cancel import Cancellation
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


class NoCookies(CookieJar):
    """A jar that keeps nothing: a response's `set-cookie` never goes out again with a later request (of this run or
    another). A guest that wants a cookie sends its own `cookie` header."""

    def __init__(self) -> None:
        super().__init__(DefaultCookiePolicy(allowed_domains=[]))  # refuses every domain, should one get through

    def set_cookie(self, cookie: Any) -> None:
        pass

    def extract_cookies(self, response: Any, request: Any) -> None:
        pass


class ClientOptions(TypedDict, total=False):
    """How an `OutboundClient` is made, all optional. `resolver`: DNS (tests fake it; default: the system's).
    `verify`: how TLS certificates are checked (default True: the system's CAs via certifi, as httpx does; tests pass
    a context trusting their own CA). `timeout_s`: the longest any request waits (default `OUTBOUND_TIMEOUT_S`)."""

    resolver: Resolver | None
    verify: ssl.SSLContext | bool
    timeout_s: float


def tls_context(options: ClientOptions) -> ssl.SSLContext:
    """The TLS context `options` ask for (loading the system's CAs takes a while: one context can serve clients)."""
    return httpx.create_ssl_context(verify=options.get("verify", True), trust_env=False)


class OutboundClient:
    """One component's client: its own connections (kept alive between its requests) and DNS threads."""

    def __init__(self, **options: Unpack[ClientOptions]) -> None:
        self._resolver = options.get("resolver") or system_resolver
        self.timeout_s = options.get("timeout_s", OUTBOUND_TIMEOUT_S)
        ssl_context = tls_context(options)
        transport = httpx.HTTPTransport(verify=ssl_context, trust_env=False)
        # httpx takes no network backend: its pool is replaced by one that connects only through `CheckedBackend`.
        # Refuse to run if httpx has moved it, rather than send through a pool that does its own DNS.
        if not isinstance(getattr(transport, "_pool", None), httpcore.ConnectionPool):
            raise RuntimeError("httpx's HTTPTransport has no `_pool`: the outbound client needs updating")
        transport._pool.close()
        transport._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=OUTBOUND_MAX_CONNECTIONS,
            max_keepalive_connections=OUTBOUND_KEEPALIVE_CONNECTIONS,
            network_backend=CheckedBackend(),
        )
        # No proxies or .netrc from the host's environment (trust_env): a proxy would do its own DNS and reach
        # whatever it likes; redirects are followed here, each checked.
        self._http = httpx.Client(
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            headers=DEFAULT_HEADERS,
            timeout=None,
            cookies=NoCookies(),
        )
        # getaddrinfo cannot be given a timeout: it runs on these threads, and the request stops waiting for it.
        self._dns = ThreadPoolExecutor(max_workers=OUTBOUND_DNS_THREADS, thread_name_prefix="llmhost-dns")

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
        cancellation: Cancellation | None = None,
    ) -> OutboundResponse:
        """Send `request` as the grants of config table `key` allow, following redirects; the whole response.
        `time_left`: seconds before the run's deadline (None: none); `cancellation`: stops the request from another
        thread (its run's scope cancels it). Raises the `LlmError` of each WIT error case."""
        if not allowed_hosts:  # nothing granted: denied whatever the request, before it is even read
            raise OutboundDenied(
                f"no outbound host is granted to this component (`{key}.allowed-outbound-hosts`); nothing was sent"
            )
        method = check_method(request.method)
        headers = check_headers(request.headers)
        if request.body is not None and len(request.body) > MAX_OUTBOUND_BODY_BYTES:  # the SDK's check, for any guest
            raise InvalidRequest(
                f"the body is {len(request.body)} bytes, over the {MAX_OUTBOUND_BODY_BYTES} bytes one request can "
                "carry; nothing was sent"
            )
        hop = Hop(parse_target(request.url), method, request.body, headers)
        cancellation = cancellation if cancellation is not None else Cancellation()
        seconds, why = self._timeout(request, time_left)
        deadline = time.monotonic() + seconds
        for redirects in range(MAX_REDIRECTS + 1):
            grant = authorize(allowed_hosts, hop.target, key)
            addresses = check_addresses(grant, hop.target, self._resolve(hop.target, deadline, why, cancellation))
            if budget is not None:
                budget.take()
            status, fields, body = self._exchange(hop, addresses, deadline, why, max_response_bytes, key, cancellation)
            location = _header(fields, "location")
            if body is not None or location is None:
                return OutboundResponse(status, fields, body or b"")
            if redirects == MAX_REDIRECTS:
                raise TooLarge(
                    f"{hop.target.origin} redirected again after {MAX_REDIRECTS} redirects (to "
                    f"{redact_url(location)!r}): a redirect loop, or too many redirects; not followed"
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

    def _resolve(self, target: Target, deadline: float, why: str, cancellation: Cancellation) -> tuple[str, ...]:
        fixed = target.fixed_addresses()
        if fixed is not None:
            return fixed
        future: Future[Sequence[str]] = self._dns.submit(self._resolver, target.connect_host, target.port)
        waited: tuple[Future[Any], ...] = (future, cancellation.signal)
        wait(waited, max(0.0, deadline - time.monotonic()), FIRST_COMPLETED)
        if cancellation.reason is not None:
            future.cancel()
            raise _stopped(target.origin, cancellation.reason)
        if not future.done():
            future.cancel()  # still queued behind hung lookups: never run it
            raise OutboundTimeout(f"resolving {target.host} did not finish within {why}")
        try:
            return tuple(future.result())
        except OSError as error:
            raise ConnectionFailed(f"cannot resolve {target.host}: {error}") from None

    def _exchange(
        self,
        hop: Hop,
        addresses: tuple[str, ...],
        deadline: float,
        why: str,
        max_bytes: int,
        key: str,
        cancellation: Cancellation,
    ) -> tuple[int, Fields, bytes | None]:
        """One request and its response: (status, headers, body), the body None for a redirect to follow."""
        origin = hop.target.origin
        token = ROUTE.set(Route(hop.target.connect_host, hop.target.port, addresses, deadline, cancellation))
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise httpx.ConnectTimeout("the deadline passed")
            # Values as UTF-8 (httpx would encode text as ASCII and raise); names are tokens, ASCII already.
            headers = [(name.encode("ascii"), value.encode("utf-8")) for name, value in hop.headers]
            headers = telemetry.inject(headers)  # traced: the current span's `traceparent` goes with it
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
                cancellation.release()  # before the connection goes back to the pool for another request
                response.close()
        except httpx.TransportError as error:
            raise _transport_error(error, origin, why, cancellation) from None
        finally:
            cancellation.release()
            ROUTE.reset(token)


def _transport_error(error: httpx.TransportError, origin: str, why: str, cancellation: Cancellation) -> Exception:
    """The `LlmError` for an exchange's failure. httpx's text quotes no URL; h11's quotes a header value it refuses,
    which is cut off (it may be a token)."""
    if cancellation.reason is not None:  # the failure is the shut-down socket: say why it was shut
        return _stopped(origin, cancellation.reason)
    if isinstance(error, httpx.TimeoutException):
        return OutboundTimeout(f"no whole response from {origin} within {why}")
    if isinstance(error, httpx.LocalProtocolError):
        reason = str(error).split(" b'", 1)[0].split(' b"', 1)[0]
        return InvalidRequest(f"the request to {origin} cannot be sent: {reason}")
    if isinstance(error, httpx.RemoteProtocolError):
        return ConnectionFailed(f"{origin} sent a malformed response, or closed the connection: {error}")
    return ConnectionFailed(f"connecting to {origin} failed: {error or type(error).__name__}")


def _stopped(origin: str, reason: str) -> ConnectionFailed:
    return ConnectionFailed(f"the request to {origin} was stopped: {reason}")


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
    # The stream itself, not `iter_raw`, which hands the connection back to the pool as soon as the body ends: the
    # caller releases it from the request's cancellation first.
    stream = response.stream
    assert isinstance(stream, httpx.SyncByteStream)
    for chunk in stream:
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
