"""Where a key-value store lives: a SQLite store's file name, a Redis store's address, and whether an outbound
grant reaches that address. Pure: no I/O, no DNS."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from urllib.parse import unquote, urlsplit

from llmhost.domain.hosts import LOCALHOST, AllowedHost, normalize_host

REDIS_PORT = 6379
_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
# The form of the file name given to a store whose name is no plain file name.
_DIGEST_NAME = re.compile(r"store-[0-9a-f]{16}", re.IGNORECASE)
# Reached through `localhost` (127.0.0.1 and ::1, never looked up) as well as by address.
_LOOPBACK = (LOCALHOST, "127.0.0.1", "::1")


def store_file_name(name: str) -> str:
    """The file of store NAME without a `path`, in DATA-DIR/kv: `NAME.db` for a plain file name, else `store-` and
    16 hex digits of the name's SHA-256 (so that no name reaches outside that directory). A plain name of that digest
    form is digested too: as itself it would be the file of another name (`x/y` lives in store-bd3c9047d6816c31.db).
    Existing stores keep their files: only names of the digest form moved."""
    if _FILE_NAME.fullmatch(name) and not _DIGEST_NAME.fullmatch(name):
        return f"{name}.db"
    return "store-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16] + ".db"


def redis_url_problem(url: str) -> str | None:
    """What makes a Redis `url` ambiguous, or None. Its text is never quoted: it may hold a password."""
    unparsable = "it does not parse (is the port a number from 1 to 65535? is an IPv6 address in brackets?)"
    try:
        parts = urlsplit(url)
    except ValueError:
        return unparsable
    if "@" in parts.query + parts.fragment or (parts.scheme != "unix" and "@" in parts.path):
        return (
            "it has an `@` after the host: percent-encode `/`, `?`, `#` and `@` in a password or a query value "
            "(%2F, %3F, %23, %40), or the client connects elsewhere than meant"
        )
    try:
        parts.port  # noqa: B018 (reading the port parses it)
    except ValueError:
        return unparsable
    return None


def redis_address(url: str) -> tuple[str, int] | None:
    """The host (normalized, as grants hold hosts) and port a redis:// or rediss:// URL connects to, as redis-py
    reads it; None for a unix socket or a URL that does not parse."""
    try:
        parts = urlsplit(url)
        port = parts.port or REDIS_PORT
    except ValueError:
        return None
    if parts.scheme not in ("redis", "rediss"):
        return None
    return normalize_host(unquote(parts.hostname or LOCALHOST)), port


def grant_reaches(grant: AllowedHost, host: str, port: int) -> bool:
    """Whether outbound HTTP under `grant` can connect to `host`:`port` (the outbound policy's rules: a loopback,
    private or other non-public address only through a grant naming it, or `localhost` for loopback; a name or a
    public address through any grant matching it, `*` included)."""
    hosts = _LOOPBACK if host in _LOOPBACK else (host,)
    return any(
        grant.matches(scheme, name, port) and (_maybe_public(name) or grant.names_address(name))
        for name in hosts
        for scheme in grant.schemes
    )


def _maybe_public(host: str) -> bool:
    if host == LOCALHOST:
        return False
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        return True  # a name: what it resolves to is not known here, so assume the worst
