"""How host messages show what may be secret: keys (`describe_key`), URLs (`redact_url`), known secrets (`scrub`).

Messages reach guests, HTTP clients and logs, so none of them quotes a whole key, a URL's credentials or a value
read from the environment. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

KEY_PREFIX_CHARS = 8  # of a key, at most this many characters are shown
MIN_SECRET_CHARS = 4  # shorter values are not scrubbed: they would mask ordinary words, and guessing them is easy
MASK = "***"


def describe_key(key: str) -> str:
    """A key as messages show it: quoted whole when short, else a short prefix and its length
    (`'user:123…' (40 characters)`), so that a key holding a token is not repeated."""
    # repr escapes controls and lone surrogates, so the message stays printable and encodable as UTF-8.
    if len(key) <= KEY_PREFIX_CHARS:
        return repr(key)
    return f"{key[:KEY_PREFIX_CHARS] + '…'!r} ({len(key)} characters)"


def redact_url(url: str) -> str:
    """`url` (absolute, or a reference such as a `location`) as messages show it: scheme, host, port and path. User
    info (name and password) and the query are replaced by `***`, the fragment is dropped. A URL with an `@` after
    its host shows no more than its scheme: a password holding an unencoded `/`, `?` or `#` makes parsers take the
    rest of it for the host or path (so `https://host/a@b` shows as `https://***`)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed `[` of an IPv6 address
        return MASK
    if any("@" in part for part in (parts.path, parts.query, parts.fragment)):
        return f"{parts.scheme}://{MASK}" if parts.scheme and parts.netloc else MASK
    shown = f"{parts.scheme}:" if parts.scheme else ""
    if parts.netloc or url[len(shown) :].lstrip().startswith("//"):
        _, at, host = parts.netloc.rpartition("@")
        shown += f"//{MASK + '@' if at else ''}{host}"
    return shown + parts.path + (f"?{MASK}" if parts.query else "")


def url_secrets(url: str) -> tuple[str, ...]:
    """What in `url` may be secret, as written and percent-decoded: its user info, password and query values (for
    `scrub`, against a library's error message that echoes them)."""
    rest = url.split("://", 1)[-1]
    userinfo = rest[: rest.rfind("@")] if "@" in rest else ""
    found = [userinfo, userinfo.partition(":")[2]]
    query = rest.partition("?")[2].partition("#")[0]
    found += [value for pair in query.split("&") for value in [pair.partition("=")[2]]]
    return tuple(dict.fromkeys(form for text in found for form in (text, unquote(text)) if text))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret (of at least MIN_SECRET_CHARS characters) replaced by `***`;
    longest first, so that a secret containing another is masked whole."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
