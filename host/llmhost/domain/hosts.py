"""`allowed-outbound-hosts` patterns (Spin's syntax) and how a URL is matched against them. Pure: no DNS, no I/O.

A pattern is `SCHEME://HOST[:PORT]`:
- SCHEME: `http`, `https` or `*` (either);
- HOST: a name (`api.example.com`), a suffix wildcard (`*.example.com`: any name below it, not the name itself),
  `*` (any host: a broad grant, still subject to the address checks), an IPv4 address, or an IPv6 one in
  brackets; `localhost` grants the loopback addresses;
- PORT: a number, or `*` (any port); absent: the scheme's default port (80 or 443).

A pattern grants the URL's scheme, host and port; what the host resolves to is checked separately
(`grants.outbound`): a name granted by name may not reach a loopback, private, link-local or metadata address
unless the pattern names that address (or `localhost`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
LOCALHOST = "localhost"
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_EXAMPLE = 'e.g. "https://api.example.com", "https://*.example.com:443", "http://localhost:*"'


@dataclass(frozen=True)
class AllowedHost:
    """One parsed pattern. `port` None: any port. `host` "*": any host; `suffix`: `*.NAME` (below NAME)."""

    pattern: str
    schemes: tuple[str, ...]
    host: str  # a lower-case name (no trailing dot), an address in canonical form (IPv6 without brackets), or "*"
    suffix: bool
    port: int | None

    @property
    def is_address(self) -> bool:
        return not self.suffix and _address(self.host) is not None

    def names_address(self, host: str) -> bool:
        """Whether this pattern grants `host` (an address, or `localhost`) explicitly, by its own name."""
        return not self.suffix and self.host != "*" and self.host == host

    def matches(self, scheme: str, host: str, port: int) -> bool:
        """Whether the pattern grants a URL's scheme, host (as `normalize_host` gives it) and port."""
        if scheme not in self.schemes:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.host == "*":
            return True
        if self.suffix:
            return host.endswith("." + self.host)
        return host == self.host


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if "%" in host:  # an IPv6 zone: not an address a grant or a URL may name
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def normalize_host(host: str) -> str:
    """A URL's host as patterns hold it: lower case, without brackets or a trailing dot, an address canonical
    (`[0:0::1]` and `::1` are one host)."""
    host = host.lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    address = _address(host)
    return str(address) if address is not None else host


def parse_allowed_host(pattern: str) -> AllowedHost:
    """Parse one `allowed-outbound-hosts` entry; ValueError says what is wrong and shows the syntax."""
    scheme, sep, rest = pattern.partition("://")
    if not sep:
        raise ValueError(f"{pattern!r} has no scheme: write SCHEME://HOST[:PORT] ({_EXAMPLE})")
    scheme = scheme.lower()
    if scheme != "*" and scheme not in SCHEMES:
        raise ValueError(f"{pattern!r}: scheme {scheme!r} is not http, https or * ({_EXAMPLE})")
    if any(c in rest for c in "/?#@") or any(c.isspace() for c in rest):
        raise ValueError(f"{pattern!r}: give only SCHEME://HOST[:PORT], no path, query or user ({_EXAMPLE})")
    host, port_text = _split_port(pattern, rest)
    port: int | None
    if port_text is None:
        if scheme == "*":
            raise ValueError(f"{pattern!r}: with scheme `*` give a port, or `:*` for any ({_EXAMPLE})")
        port = DEFAULT_PORTS[scheme]
    elif port_text == "*":
        port = None
    elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"{pattern!r}: port {port_text!r} is not a number from 1 to 65535 or `*`")
    host = host.lower()
    suffix = host.startswith("*.")
    name = host[2:] if suffix else host
    if name.endswith(".") and name != ".":  # `example.com.` is `example.com`
        name = name[:-1]
    address = _address(name)
    if address is not None:
        name = str(address)
    elif name != "*" and not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(
            f"{pattern!r}: {host!r} is not a host name (ASCII; write international names in their xn-- form), "
            f"`*.NAME`, `*` or an IP address ({_EXAMPLE})"
        )
    if suffix and (address is not None or name == "*"):
        raise ValueError(f"{pattern!r}: `*.` takes a domain name after it ({_EXAMPLE})")
    schemes = SCHEMES if scheme == "*" else (scheme,)
    return AllowedHost(pattern, schemes, name, suffix, port)


def _split_port(pattern: str, rest: str) -> tuple[str, str | None]:
    if rest.startswith("["):  # an IPv6 address
        end = rest.find("]")
        if end < 0:
            raise ValueError(f"{pattern!r}: an IPv6 address needs its closing `]`")
        host, tail = rest[1:end], rest[end + 1 :]
        address = _address(host)
        if address is None or address.version != 6:
            raise ValueError(f"{pattern!r}: {host!r} is not an IPv6 address")
        if not tail:
            return host, None
        if not tail.startswith(":"):
            raise ValueError(f"{pattern!r}: expected `:PORT` after the address")
        return host, tail[1:]
    host, sep, port = rest.rpartition(":")
    if not sep:
        return rest, None
    if not host:
        raise ValueError(f"{pattern!r}: no host before the port")
    if ":" in host:
        raise ValueError(f'{pattern!r}: write an IPv6 address in brackets, e.g. "http://[::1]:8080"')
    return host, port


def parse_allowed_hosts(patterns: tuple[str, ...] | list[str]) -> tuple[AllowedHost, ...]:
    return tuple(parse_allowed_host(p) for p in patterns)


def matching_grant(grants: tuple[AllowedHost, ...], scheme: str, host: str, port: int) -> AllowedHost | None:
    """The first grant for a URL's scheme, host (normalized) and port, preferring one that names the host itself
    (so that `http://127.0.0.1:8080` beside `http://*:*` lets the request reach that address)."""
    found = [grant for grant in grants if grant.matches(scheme, host, port)]
    return next((grant for grant in found if grant.names_address(host)), found[0] if found else None)
