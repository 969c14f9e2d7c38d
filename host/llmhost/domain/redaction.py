"""How host messages show what may be secret: keys (`describe_key`, and `redact_quoted` for a key holding a secret),
URLs (`redact_url`), known secrets (`scrub`), credentials a server echoes (`scrub_credentials`).

Messages reach guests, HTTP clients and logs, so none of them quotes a whole key, a URL's credentials or a value
read from the environment. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
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


# Where messages clip a long quote (`describe_key`'s "…", a URL's "..."): what stands just before may be the start of
# a secret cut off there, which the whole-secret match misses.
_CLIPS = re.compile(r"…|\.\.\.")
MIN_CLIPPED_SECRET_CHARS = 3  # a clipped quote ending in this many of a secret's first characters is masked


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret (of at least MIN_SECRET_CHARS characters) replaced by `***`;
    longest first, so that a secret containing another is masked whole. A quote clipped in the middle of a secret
    (its start, then "…" or "...") has that start masked too."""
    ordered = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
    for secret in ordered:
        text = text.replace(secret, MASK)
    return _mask_clipped(text, ordered) if ordered else text


def _mask_clipped(text: str, secrets: list[str]) -> str:
    """`text` with the longest secret start (MIN_CLIPPED_SECRET_CHARS or more) just before each clip marker masked."""
    out: list[str] = []
    done = 0
    for clip in _CLIPS.finditer(text):
        before = text[done : clip.start()]
        starts = ((n, secret) for secret in secrets for n in range(MIN_CLIPPED_SECRET_CHARS, len(secret)))
        cut = max((n for n, secret in starts if before.endswith(secret[:n])), default=0)
        out.append((before[:-cut] + MASK) if cut else before)
        out.append(clip.group(0))
        done = clip.end()
    out.append(text[done:])
    return "".join(out)


# A credential a server echoes back (its error quoting our request's headers): `Bearer TOKEN`, `Basic TOKEN`, and the
# value of an `Authorization`, `Proxy-Authorization`, `X-Api-Key` or `api-key` field however it is quoted.
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[^\s\"',;}\]]+")
_AUTH_FIELD = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api[-_]?key)([\"']?\s*[:=]\s*[\"']?)(?!(?:bearer|basic|token)\s)"
    r"[^\s\"',;}\]]+"
)


def scrub_credentials(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without `secrets` (`scrub`) and without any credential it quotes: a bearer or basic token, and the
    value of an `Authorization` (or API key) field, whether or not it is one of `secrets`."""
    text = _SCHEME_TOKEN.sub(rf"\1\2{MASK}", scrub(text, secrets))
    return _AUTH_FIELD.sub(rf"\1\2{MASK}", text)


def redact_quoted(text: str, value: str, scrub: Callable[[str], str], also: Iterable[str] = ()) -> str:
    """`text` with the shown form of `value` (`describe_key`: its first characters) replaced whole by `***` when
    `value`, or one of `also` (other forms of it, such as the key a cursor encodes), holds a secret (`scrub` changes
    it). Scrubbing the text alone misses a secret that the message shows only in part."""
    if any(scrub(form) != form for form in (value, *also)):
        text = text.replace(describe_key(value), f"{MASK} ({len(value)} characters, holding a secret value)")
    return text
