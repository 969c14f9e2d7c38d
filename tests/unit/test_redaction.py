"""What host messages show of keys, URLs and known secrets (host/llmhost/domain/redaction.py; issue 54)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.domain.redaction import describe_key, redact_url, scrub, url_secrets

SECRET_TAIL = "Z9y8X7w6V5u4T3s2R1q0p9o8N7m6"


def test_a_long_key_shows_a_short_prefix_and_its_length() -> None:
    key = "sk_live_" + SECRET_TAIL
    shown = describe_key(key)
    assert shown == f"'sk_live_…' ({len(key)} characters)"
    assert SECRET_TAIL[:4] not in shown


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("a", "'a'"),
        ("12345678", "'12345678'"),  # short keys whole
        ("123456789", "'12345678…' (9 characters)"),
        ("a\0b", "'a\\x00b'"),  # controls escaped
        ("\udcff" * 20, "'" + "\\udcff" * 8 + "…' (20 characters)"),  # lone surrogates escaped
        ("ключ-鍵-🔑-long", "'ключ-鍵-🔑…' (13 characters)"),
    ],
)
def test_describe_key(key: str, shown: str) -> None:
    assert describe_key(key) == shown
    describe_key(key).encode("utf-8")  # always encodable: it becomes a WIT string


@given(st.text(st.characters(codec=None, exclude_categories=())))
def test_describe_key_is_always_encodable_and_shows_eight_characters_at_most(key: str) -> None:
    shown = describe_key(key)
    shown.encode("utf-8")
    if len(key) <= 8:
        assert eval(shown) == key  # noqa: S307 (the repr describe_key built)
    else:
        assert shown.endswith(f" ({len(key)} characters)")
        assert eval(shown.rsplit(" (", 1)[0]) == key[:8] + "…"  # noqa: S307


# (url, what must not be shown, what is shown)
URLS = [
    ("redis://:Pa@ss@host/0", ["Pa@ss", "ss@"], "redis://***@host/0"),  # an unencoded @ in the password
    ("redis://:p%40ss:w0rd@host:6380/1", ["p%40ss", "w0rd"], "redis://***@host:6380/1"),  # %40 and a colon
    ("redis://user:s3cr:et@host/0", ["user", "s3cr", "et@"], "redis://***@host/0"),  # user names dropped too
    ("redis://onlyuser@host", ["onlyuser"], "redis://***@host"),  # `redis://PASSWORD@host`, a common mistake
    ("redis://host/0?password=SECRET-1", ["SECRET-1", "password"], "redis://host/0?***"),
    ("redis://host/0?db=1&token=T0KEN&x=y", ["T0KEN"], "redis://host/0?***"),
    (
        "rediss://default:s3cret@redis.example.com:6380/0",
        ["s3cret", "default"],
        "rediss://***@redis.example.com:6380/0",
    ),
    ("unix:///run/redis.sock?db=0&password=pw-99", ["pw-99"], "unix:///run/redis.sock?***"),
    ("unix://:pw-99@/run/redis.sock", ["pw-99"], "unix://***@/run/redis.sock"),
    # A password with an unencoded /, ? or #: the parser takes part of it for the host or port.
    ("redis://:pa/ss@host/0", ["pa", "ss"], "redis://***"),
    ("redis://:pa?ss@host/0", ["pa", "ss"], "redis://***"),
    ("redis://:pa#ss@host/0", ["pa", "ss"], "redis://***"),
    ("redis://:pw@host/0?password=p@ss2", ["pw", "p@ss2", "ss2"], "redis://***"),
    ("user:pass@host", ["user", "pass"], "***"),
    ("redis://[::1", [], "***"),  # does not parse
    ("redis://[::1]:6379/0", [], "redis://[::1]:6379/0"),  # nothing to hide
    ("https://api.example.com/v1/items?api_key=K3Y#frag", ["K3Y", "frag"], "https://api.example.com/v1/items?***"),
    ("/callback?token=T0K", ["T0K"], "/callback?***"),  # a reference (a redirect's location)
    ("//u:p4ss@other.example/x", ["p4ss"], "//***@other.example/x"),
]


@pytest.mark.parametrize(("url", "hidden", "shown"), URLS)
def test_redact_url(url: str, hidden: list[str], shown: str) -> None:
    assert redact_url(url) == shown
    for secret in hidden:
        assert secret not in redact_url(url)


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("redis://:Pa@ss@host/0", {"Pa@ss"}),
        ("redis://u:p%40ss@host/0", {"p%40ss", "p@ss"}),
        ("redis://host/0?password=SECRET-1", {"SECRET-1"}),
    ],
)
def test_url_secrets_for_scrubbing_library_messages(url: str, secrets: set[str]) -> None:
    assert secrets <= set(url_secrets(url))
    for secret in secrets:
        assert secret not in scrub(f"error near {secret}!", url_secrets(url))


def test_scrub_masks_every_occurrence_longest_first() -> None:
    text = "token abcdef, again abcdef; part abcd; short abc"
    assert scrub(text, ["abcd", "abcdef", "abc", ""]) == "token ***, again ***; part ***; short abc"
    assert scrub(text, []) == text


def test_scrub_credentials_masks_the_key_and_any_authorization_value() -> None:
    from llmhost.domain.redaction import scrub_credentials

    text = (
        'refused: {"Authorization": "Bearer sk-ours-123456", "x-api-key": "k-987654321"} '
        "authorization: Basic dXNlcjpwYXNz; proxy-authorization=Token abcdefgh; key sk-ours-123456 again"
    )
    scrubbed = scrub_credentials(text, ["sk-ours-123456"])
    for secret in ("sk-ours", "k-987654321", "dXNlcjpwYXNz", "abcdefgh"):
        assert secret not in scrubbed, scrubbed
    assert scrubbed.count("***") == 5 and "refused:" in scrubbed


def test_redact_quoted_masks_a_key_whole_when_it_holds_a_secret() -> None:
    from llmhost.domain.redaction import redact_quoted

    secret = "hunter2-secret"
    key = "k:" + secret
    message = f"the value of {describe_key(key)} is bad"
    assert "hunter" in message  # the prefix shown holds part of the secret
    assert "hunter" not in scrub(message, [secret])  # scrub's clip rule masks it; redact_quoted masks the key whole
    redacted = redact_quoted(message, key, lambda text: scrub(text, [secret]))
    assert "hunter" not in redacted and f"*** ({len(key)} characters, holding a secret value)" in redacted
    assert redact_quoted(message, key, lambda text: text) == message


def test_a_quote_clipped_inside_a_secret_shows_none_of_it() -> None:
    """A key's `describe_key` prefix, or a URL clipped with "...", may end in the first characters of a secret: the
    whole-secret match misses those, the clip rule masks them (an ordinary "..." stays as it is)."""
    secret = "sk-abcdef123456"
    key_message = f"the value of {describe_key(secret + ':user')} is bad"
    assert "sk-abcde" in key_message  # what the old scrub let through
    assert "sk-" not in scrub(key_message, [secret]) and "***…" in scrub(key_message, [secret])
    url_message = "the URL 'http://x/" + "a" * 50 + "sk-ab...' is malformed"
    assert scrub(url_message, [secret]) == "the URL 'http://x/" + "a" * 50 + "***...' is malformed"
    assert scrub("loading... done, sk- is a prefix", [secret]) == "loading... done, sk- is a prefix"
    assert scrub("two secrets sk-abcdef123456 and ...", [secret]) == "two secrets *** and ..."
