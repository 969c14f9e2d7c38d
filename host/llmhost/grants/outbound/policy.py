"""What an outbound request may do, decided before anything is sent. Pure: no DNS, no sockets.

- `parse_target`: the URL, parsed once by the same parser that sends it (httpx's), so that the host checked is
  the host connected to; a malformed URL or a scheme other than http(s) is `invalid-request`.
- `authorize`: the component's `allowed-outbound-hosts` grant for the URL's scheme, host and port, else `denied`.
- `check_addresses`: every address the host resolves to must be public, unless the grant names that very address
  (or `localhost`): loopback, private, link-local, cloud metadata, unspecified, multicast and reserved addresses,
  and IPv4 ones wrapped in IPv6 (mapped, NAT64, 6to4), are `denied` otherwise. The client then connects only to
  the addresses checked here (no second lookup: no DNS rebinding).
- `check_method`, `check_headers`: what HTTP would let through a request line or a header (CR, LF, NUL, spaces)
  is `invalid-request`, and nothing is sent.
- `redirect`: where a 3xx response leads, and with which method, body and headers; each hop is checked again.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass

import httpx

from llmhost.domain.errors import ConnectionFailed, InvalidRequest, OutboundDenied
from llmhost.domain.hosts import DEFAULT_PORTS, LOCALHOST, SCHEMES, AllowedHost, matching_grant, normalize_host
from llmhost.domain.redaction import redact_url

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Fields = tuple[tuple[str, str], ...]

# `localhost` is never looked up: it is the loopback addresses (RFC 6761), whatever /etc/hosts or DNS say.
LOCALHOST_ADDRESSES = ("127.0.0.1", "::1")
# Cloud metadata services. Most lie in ranges refused anyway (link-local, private, shared); Azure's is a public
# address, so each is named here, and messages call them what they are.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle...
        "169.254.170.2",  # AWS ECS task metadata
        "168.63.129.16",  # Azure's wire server (public address space)
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS, over IPv6
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# An HTTP token (RFC 9110 5.6.2): what a method or a header name may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A header value: visible ASCII, spaces, tabs and any non-ASCII text; no CR, LF, NUL or other controls.
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Set by the host, from the URL and the body: a guest's own would contradict them or smuggle a second request.
HOST_SET_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer"}
)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Dropped when a redirect leaves the origin they were meant for (as browsers and httpx do).
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
MAX_METHOD_CHARS = 32
# A host name as the URL parser leaves it (international names already in their xn-- form).
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")


@dataclass(frozen=True)
class Target:
    """A parsed request URL: `host` normalized as grants hold it, `port` explicit."""

    url: httpx.URL
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def connect_host(self) -> str:
        """The host as the connection pool names it when it connects (httpx's ASCII form, no brackets)."""
        return self.url.raw_host.decode("ascii")

    def fixed_addresses(self) -> tuple[str, ...] | None:
        """The addresses of a host that needs no lookup: an IP address, or `localhost`."""
        if self.host == LOCALHOST:
            return LOCALHOST_ADDRESSES
        return (self.host,) if _parse_address(self.host) is not None else None


def parse_target(url: str) -> Target:
    """Parse an absolute http(s) URL; `InvalidRequest` says what is wrong with it (quoting the URL without its
    query or credentials: a guest's token must not travel on in a message)."""
    shown = _shown(redact_url(url))
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise InvalidRequest(f"the URL {shown} contains a space or a control character (percent-encode them)")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, UnicodeError) as error:
        # httpx quotes the host or port it could not parse: with an "@" in the URL, that may be part of a password.
        why = "" if "@" in url else f": {error}"
        raise InvalidRequest(f"the URL {shown} is malformed{why}") from None
    scheme = parsed.scheme
    if scheme not in SCHEMES:
        what = f"scheme {scheme!r}" if scheme else "no scheme"
        raise InvalidRequest(f"the URL {shown} has {what}: only absolute http:// and https:// URLs can be sent")
    if not parsed.raw_host:
        raise InvalidRequest(f"the URL {shown} has no host")
    if parsed.userinfo:
        raise InvalidRequest(f"the URL {shown} has a user name or password: send credentials in a header instead")
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise InvalidRequest(f"the URL {shown} has port {port}, not one from 1 to 65535")
    host = normalize_host(parsed.raw_host.decode("ascii", "replace"))
    if _parse_address(host) is None and not _NAME.fullmatch(host):
        raise InvalidRequest(f"the URL {shown} has a host that is not a valid name or IP address")
    return Target(parsed, scheme, host, port)


def authorize(grants: tuple[AllowedHost, ...], target: Target, key: str) -> AllowedHost:
    """The grant for `target`, or `OutboundDenied` naming the config key (`key`: e.g. `sandbox`)."""
    grant = matching_grant(grants, target.scheme, target.host, target.port)
    if grant is None:
        if not grants:
            raise OutboundDenied(
                f"{target.origin} is not granted: no outbound host is granted to this component (add it to "
                f"`{key}.allowed-outbound-hosts`)"
            )
        listed = ", ".join(g.pattern for g in grants)
        raise OutboundDenied(
            f"{target.origin} is not granted (`{key}.allowed-outbound-hosts` is [{listed}]); nothing was sent"
        )
    return grant


def address_problem(address: Address) -> str | None:
    """Why `address` may not be reached unless a grant names it ("loopback", "private", ...), or None if public."""
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            problem = address_problem(embedded)
            return None if problem is None else f"{problem} (IPv4 {embedded} inside IPv6)"
    for problem, test in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),  # fec0::/10, retired
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    ):
        if test:
            return problem
    if not address.is_global:  # shared (100.64/10), documentation, benchmarking... ranges
        return "non-public"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::a.b.c.d), 6to4."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _parse_address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def check_addresses(grant: AllowedHost, target: Target, addresses: tuple[str, ...]) -> tuple[str, ...]:
    """`addresses` (what `target`'s host resolved to), each checked: returned as they may be connected to, or
    `OutboundDenied` naming the first that may not be reached (one bad address refuses the name: a name that
    resolves to a public and a private address is a rebinding attempt as likely as not)."""
    if not addresses:
        raise ConnectionFailed(f"{target.host} resolved to no address")
    if grant.names_address(target.host) and target.fixed_addresses() is not None:
        return addresses  # the grant names this very address, or `localhost` (whose addresses are fixed)
    for text in addresses:
        address = _parse_address(text.split("%", 1)[0])
        problem = "unparsable" if address is None else address_problem(address)
        if problem is not None:
            via = "" if text == target.host else f"{target.host} resolves to "
            raise OutboundDenied(
                f"{target.origin} is denied: {via}{text}, a {problem} address, which a grant reaches only by "
                f"naming the address itself (or `localhost`) in allowed-outbound-hosts, not through {grant.pattern}; "
                "nothing was sent"
            )
    return addresses


def check_method(method: str) -> str:
    if not method or len(method) > MAX_METHOD_CHARS or not _TOKEN.fullmatch(method):
        raise InvalidRequest(
            f"the method {_shown(method)} is not an HTTP method (letters and !#$%&'*+-.^_`|~ only, no spaces, at "
            f"most {MAX_METHOD_CHARS} characters)"
        )
    return method


def check_headers(headers: Fields) -> Fields:
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise InvalidRequest(
                f"the header name {_shown(name)} is not an HTTP token (no spaces, colons, CR, LF or NUL)"
            )
        if _BAD_VALUE.search(value):
            raise InvalidRequest(
                f"the value of header {name!r} contains CR, LF, NUL or another control character: not sent"
            )
        if value != value.strip(" \t"):  # HTTP/1.1 refuses it; said here, as h11's message would quote the value
            raise InvalidRequest(f"the value of header {name!r} starts or ends with a space or a tab: not sent")
        if name.lower() in HOST_SET_HEADERS:
            raise InvalidRequest(f"the header {name!r} is set by the host (from the URL and the body): leave it out")
    return headers


@dataclass(frozen=True)
class Hop:
    """The next request of a redirect chain."""

    target: Target
    method: str
    body: bytes | None
    headers: Fields


def redirect(current: Target, method: str, body: bytes | None, headers: Fields, status: int, location: str) -> Hop:
    """The request a redirect leads to (as browsers and httpx follow them): 303, and 301/302 after a POST, become a
    GET without a body; 307 and 308 keep both. Credentials are dropped when the origin changes."""
    try:
        url = current.url.join(location)
    except (httpx.InvalidURL, ValueError, UnicodeError) as error:
        why = "" if "@" in location else f": {error}"
        shown = _shown(redact_url(location))
        raise ConnectionFailed(f"{current.origin} redirected to a malformed Location {shown}{why}") from None
    try:
        target = parse_target(str(url))
    except InvalidRequest as error:
        raise OutboundDenied(f"{current.origin} redirected to a URL that cannot be followed: {error.message}") from None
    if status == 303 or (status in (301, 302) and method == "POST"):
        method, body = ("HEAD" if method == "HEAD" else "GET"), None
        headers = tuple((n, v) for n, v in headers if n.lower() not in ("content-type", "content-encoding"))
    if (target.scheme, target.host, target.port) != (current.scheme, current.host, current.port):
        headers = tuple((n, v) for n, v in headers if n.lower() not in CREDENTIAL_HEADERS)
    return Hop(target, method, body, headers)


class RequestBudget:
    """The outbound requests one run or request may still send (`max-outbound-requests`, redirects included)."""

    def __init__(self, limit: int, key: str) -> None:
        self.limit = limit
        self.key = key
        self.sent = 0
        self._lock = threading.Lock()

    def take(self) -> None:
        """Count one request about to be sent, or `OutboundDenied` naming the key when none is left."""
        with self._lock:
            if self.sent >= self.limit:
                raise OutboundDenied(
                    f"this run has sent its limit of {self.limit} outbound requests (redirects included); raise "
                    f"`{self.key}` to send more; nothing was sent"
                )
            self.sent += 1


def _shown(text: str, limit: int = 200) -> str:
    """`text` as messages quote it: repr (so CR, LF and the like are visible), clipped, always encodable."""
    shown = repr(text if len(text) <= limit else text[:limit] + "...")
    return shown.encode("utf-8", "backslashreplace").decode("utf-8")
