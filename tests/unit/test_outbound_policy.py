"""The outbound HTTP policy, pure: `allowed-outbound-hosts` patterns (domain/hosts.py), URLs, the address checks
(SSRF), methods and headers, redirects, and the request budget (grants/outbound/policy.py)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.domain.errors import ConnectionFailed, InvalidRequest, OutboundDenied
from llmhost.domain.hosts import matching_grant, normalize_host, parse_allowed_host, parse_allowed_hosts
from llmhost.grants.outbound import policy
from llmhost.grants.outbound.policy import (
    RequestBudget,
    address_problem,
    authorize,
    check_addresses,
    check_headers,
    check_method,
    parse_target,
    redirect,
)


def grants(*patterns: str) -> tuple:  # type: ignore[type-arg]
    return parse_allowed_hosts(list(patterns))


def allowed(patterns: tuple[str, ...], url: str) -> bool:
    target = parse_target(url)
    return matching_grant(grants(*patterns), target.scheme, target.host, target.port) is not None


# -- patterns ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "schemes", "host", "suffix", "port"),
    [
        ("https://api.example.com", ("https",), "api.example.com", False, 443),
        ("http://api.example.com", ("http",), "api.example.com", False, 80),
        ("https://*.example.com:443", ("https",), "example.com", True, 443),
        ("http://localhost:*", ("http",), "localhost", False, None),
        ("*://example.com:8080", ("http", "https"), "example.com", False, 8080),
        ("HTTPS://API.Example.COM.", ("https",), "api.example.com", False, 443),
        ("http://127.0.0.1:8080", ("http",), "127.0.0.1", False, 8080),
        ("http://[0:0::1]:8080", ("http",), "::1", False, 8080),
        ("https://*:*", ("https",), "*", False, None),
    ],
)
def test_patterns_parse(pattern: str, schemes: tuple[str, ...], host: str, suffix: bool, port: int | None) -> None:
    parsed = parse_allowed_host(pattern)
    assert (parsed.schemes, parsed.host, parsed.suffix, parsed.port) == (schemes, host, suffix, port)


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("example.com", "no scheme"),
        ("ftp://example.com", "scheme 'ftp'"),
        ("https://example.com/path", "no path"),
        ("https://user@example.com", "no path, query or user"),
        ("https://example.com:0", "port '0'"),
        ("https://example.com:65536", "port '65536'"),
        ("https://example.com:http", "port 'http'"),
        ("*://example.com", "give a port"),
        ("https://*.1.2.3.4", "takes a domain name"),
        ("https://*.*", "takes a domain name"),
        ("https://exa mple.com", "no path"),
        ("https://-bad-.com", "not a host name"),
        ("http://fe80::1:8080", "in brackets"),
        ("http://[fe80::1", "closing"),
        ("http://[1.2.3.4]:80", "not an IPv6 address"),
        ("http://bücher.de", "xn--"),
    ],
)
def test_bad_patterns_say_what_is_wrong(pattern: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_allowed_host(pattern)
    assert says in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    ("patterns", "url", "granted"),
    [
        (("https://api.example.com",), "https://api.example.com/v1?q=1", True),
        (("https://api.example.com",), "https://API.example.com./v1", True),  # case and the root dot
        (("https://api.example.com",), "http://api.example.com/", False),  # scheme
        (("https://api.example.com",), "https://api.example.com:8443/", False),  # port (443 by default)
        (("https://api.example.com",), "https://api.example.com:443/", True),
        (("https://api.example.com",), "https://example.com/", False),
        (("https://api.example.com",), "https://xapi.example.com/", False),
        (("https://*.example.com",), "https://a.example.com/", True),
        (("https://*.example.com",), "https://a.b.example.com/", True),
        (("https://*.example.com",), "https://example.com/", False),  # `*.` is below the name, not the name
        (("https://*.example.com",), "https://badexample.com/", False),
        (("https://*.example.com",), "https://example.com.evil.net/", False),
        (("*://example.com:*",), "http://example.com:1234/", True),
        (("*://example.com:*",), "https://example.com/", True),
        (("http://localhost:*",), "http://localhost:8080/", True),
        (("http://localhost:*",), "http://127.0.0.1:8080/", False),  # a name grant is not its addresses
        (("http://127.0.0.1:8080",), "http://127.0.0.1:8080/x", True),
        (("http://127.0.0.1:8080",), "http://localhost:8080/x", False),
        (("http://[::1]:8080",), "http://[0:0::1]:8080/", True),  # one address, two spellings
        ((), "https://api.example.com/", False),
    ],
)
def test_urls_against_patterns(patterns: tuple[str, ...], url: str, granted: bool) -> None:
    assert allowed(patterns, url) is granted


def test_a_grant_naming_the_address_is_preferred_to_a_wildcard() -> None:
    both = grants("http://*:*", "http://127.0.0.1:8080")
    target = parse_target("http://127.0.0.1:8080/")
    assert authorize(both, target, "sandbox").pattern == "http://127.0.0.1:8080"


_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
# The last label starts with a letter, as a top-level domain does: all digits, a name would be an IPv4 address.
_top = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_domain = st.tuples(st.lists(_label, max_size=3), _top).map(lambda parts: ".".join([*parts[0], parts[1]]))


@given(_domain, st.lists(_label, min_size=1, max_size=3).map(".".join), st.integers(1, 65535))
def test_a_suffix_grant_covers_exactly_the_names_below_it(domain: str, below: str, port: int) -> None:
    pattern = (f"https://*.{domain}:{port}",)
    assert allowed(pattern, f"https://{below}.{domain}:{port}/")
    assert not allowed(pattern, f"https://{domain}:{port}/")
    assert not allowed(pattern, f"https://{below}{domain}:{port}/")  # no dot: another name
    assert not allowed(pattern, f"http://{below}.{domain}:{port}/")
    assert not allowed(pattern, f"https://{below}.{domain}:{port % 65535 + 1}/")


# -- URLs -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("example.com/x", "no scheme"),
        ("http:///x", "no host"),
        ("http://exa mple.com/", "a space"),
        ("http://example.com/a\r\nHost: evil", "control character"),
        ("http://example.com:99999/", "port 99999"),
        ("http://[::1/", "malformed"),
        ("http://user:secret@example.com/", "user name or password"),
        ("http://exa%20mple.com/", "not a valid name"),
    ],
)
def test_malformed_urls_are_invalid_requests(url: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_target(url)
    assert says in caught.value.message, caught.value.message


def test_international_names_are_matched_in_their_ascii_form() -> None:
    target = parse_target("https://bücher.de/")
    assert target.host == "xn--bcher-kva.de"
    assert allowed(("https://xn--bcher-kva.de",), "https://BÜCHER.de/")


def test_normalize_host() -> None:
    assert normalize_host("[0:0:0:0:0:0:0:1]") == "::1"
    assert normalize_host("Example.COM.") == "example.com"
    assert normalize_host("localhost.") == "localhost"


# -- addresses (SSRF) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("168.63.129.16", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.1.2.3", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("100.64.0.1", "non-public"),  # shared address space (carrier NAT)
        ("192.0.2.1", "private"),  # documentation
        ("::ffff:127.0.0.1", "loopback (IPv4 127.0.0.1 inside IPv6)"),
        ("::ffff:169.254.169.254", "cloud metadata (IPv4 169.254.169.254 inside IPv6)"),
        ("64:ff9b::10.0.0.1", "private (IPv4 10.0.0.1 inside IPv6)"),
        ("2002:7f00:1::", "loopback (IPv4 127.0.0.1 inside IPv6)"),  # 6to4
    ],
)
def test_non_public_addresses_are_named(address: str, problem: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_wrapped_in_ipv6_is_judged_as_itself(address: ipaddress.IPv4Address) -> None:
    plain = address_problem(address)
    for wrapped in (f"::ffff:{address}", f"64:ff9b::{address}"):
        problem = address_problem(ipaddress.ip_address(wrapped))
        assert (problem is None) == (plain is None), (wrapped, problem, plain)


_NON_PUBLIC = ("10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7",
               "fe80::/10")  # fmt: skip


@given(st.sampled_from(_NON_PUBLIC).flatmap(lambda network: st.ip_addresses(network=network)))
def test_every_private_loopback_and_link_local_address_is_refused(address: policy.Address) -> None:
    assert address_problem(address) is not None


def test_a_name_granted_by_name_never_reaches_a_private_address() -> None:
    grant = parse_allowed_host("https://api.example.com")
    target = parse_target("https://api.example.com/")
    assert check_addresses(grant, target, ("93.184.216.34",)) == ("93.184.216.34",)
    for bad in ("127.0.0.1", "10.0.0.7", "169.254.169.254", "::ffff:10.0.0.7", "fe80::1%eth0"):
        with pytest.raises(OutboundDenied) as caught:
            check_addresses(grant, target, ("93.184.216.34", bad))  # one bad answer refuses the name
        assert bad in caught.value.message and "api.example.com resolves to" in caught.value.message


def test_a_wildcard_grant_does_not_name_an_address() -> None:
    grant = parse_allowed_host("http://*:*")
    for url in ("http://127.0.0.1:8080/", "http://localhost:8080/", "http://[::1]:80/", "http://169.254.169.254/"):
        target = parse_target(url)
        with pytest.raises(OutboundDenied):
            check_addresses(grant, target, target.fixed_addresses() or ())


def test_a_grant_naming_the_address_or_localhost_reaches_it() -> None:
    for pattern, url in (
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
        ("http://localhost:*", "http://localhost:8080/"),
        ("http://[::1]:8080", "http://[::1]:8080/"),
        ("http://169.254.169.254", "http://169.254.169.254/latest/meta-data/"),
    ):
        target = parse_target(url)
        addresses = target.fixed_addresses()
        assert addresses is not None
        assert check_addresses(parse_allowed_host(pattern), target, addresses) == addresses


def test_localhost_is_never_looked_up() -> None:
    assert parse_target("http://LOCALHOST.:1/").fixed_addresses() == ("127.0.0.1", "::1")
    assert parse_target("http://example.com/").fixed_addresses() is None


def test_no_address_is_a_connection_error() -> None:
    with pytest.raises(ConnectionFailed):
        check_addresses(parse_allowed_host("https://a.example"), parse_target("https://a.example/"), ())


# -- methods and headers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST", "PATCH", "PROPFIND", "M-SEARCH"])
def test_methods(method: str) -> None:
    assert check_method(method) == method


@pytest.mark.parametrize("method", ["", "GET /x HTTP/1.1\r\n", "G ET", "GET\n", "GÉT", "G(T", "A" * 33])
def test_bad_methods_are_invalid_requests(method: str) -> None:
    with pytest.raises(InvalidRequest, match="not an HTTP method"):
        check_method(method)


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ((("x-a", "1\r\nx-injected: 2"),), "CR, LF, NUL"),
        ((("x-a", "1\nx"),), "CR, LF, NUL"),
        ((("x-a", "1\x00"),), "CR, LF, NUL"),
        ((("x-a\r\nx-b", "1"),), "not an HTTP token"),
        ((("x a", "1"),), "not an HTTP token"),
        ((("", "1"),), "not an HTTP token"),
        ((("x:a", "1"),), "not an HTTP token"),
        ((("Host", "evil.example"),), "set by the host"),
        ((("transfer-encoding", "chunked"),), "set by the host"),
        ((("Content-Length", "5"),), "set by the host"),
    ],
)
def test_header_injection_is_an_invalid_request(headers: tuple[tuple[str, str], ...], says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_headers(headers)
    assert says in caught.value.message


@pytest.mark.parametrize("value", ["Bearer s3cret\r\n", " Bearer s3cret", "Bearer s3cret\t"])
def test_a_header_value_never_appears_in_the_error(value: str) -> None:
    """Leading or trailing whitespace is refused here: HTTP/1.1 refuses it too, with a message quoting the value."""
    with pytest.raises(InvalidRequest) as caught:
        check_headers((("authorization", value),))
    assert "s3cret" not in caught.value.message and "authorization" in caught.value.message


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret@example.com/a?token=s3cret",
        "http://example.com/a b?token=s3cret",
        "http://user:s3cret@example.com:99999/",
        "gopher://example.com/?token=s3cret",
        "http://user:s3c/ret@example.com/",  # a password with a "/": httpx takes "s3c" for a port
    ],
)
def test_a_malformed_urls_query_and_credentials_never_appear_in_the_error(url: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_target(url)
    assert "s3c" not in caught.value.message


def test_ordinary_headers_pass() -> None:
    fields = (("Authorization", "Bearer x"), ("x-tab", "a\tb"), ("x-utf8", "café"))
    assert check_headers(fields) == fields


# -- redirects ------------------------------------------------------------------------------------------------------


def test_a_relative_redirect_keeps_the_origin_and_the_credentials() -> None:
    current = parse_target("https://api.example.com/a/b")
    hop = redirect(current, "GET", None, (("authorization", "t"),), 302, "../c?x=1")
    assert str(hop.target.url) == "https://api.example.com/c?x=1"
    assert hop.headers == (("authorization", "t"),)


def test_a_redirect_to_another_origin_drops_credentials() -> None:
    current = parse_target("https://api.example.com/")
    headers = (("Authorization", "t"), ("Cookie", "c"), ("x-keep", "k"))
    hop = redirect(current, "GET", None, headers, 301, "https://other.example.com/")
    assert hop.headers == (("x-keep", "k"),)


@pytest.mark.parametrize(
    ("status", "method", "after"),
    [(301, "POST", "GET"), (302, "POST", "GET"), (303, "PUT", "GET"), (303, "HEAD", "HEAD"), (307, "POST", "POST"),
     (308, "PUT", "PUT"), (301, "PUT", "PUT")],
)  # fmt: skip
def test_redirect_methods(status: int, method: str, after: str) -> None:
    hop = redirect(parse_target("https://a.example/"), method, b"body", (), status, "/next")
    assert hop.method == after
    kept = status in (307, 308) or (status in (301, 302) and method != "POST")
    assert hop.body == (b"body" if kept else None)


def test_a_redirect_to_another_scheme_is_denied_and_a_malformed_one_a_connection_error() -> None:
    current = parse_target("https://a.example/")
    with pytest.raises(OutboundDenied, match="scheme 'file'"):
        redirect(current, "GET", None, (), 302, "file:///etc/passwd")
    with pytest.raises(ConnectionFailed, match="malformed Location"):
        redirect(current, "GET", None, (), 302, "http://[::1/")


def test_the_request_budget_counts_and_names_its_key() -> None:
    budget = RequestBudget(2, "sandbox.max-outbound-requests")
    budget.take()
    budget.take()
    with pytest.raises(OutboundDenied, match="sandbox.max-outbound-requests"):
        budget.take()
