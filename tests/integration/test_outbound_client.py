"""The outbound HTTP client (grants/outbound) against real servers on loopback (tests/outbound_servers.py): grants,
the address checks with a fake resolver (SSRF, DNS rebinding), redirects, limits, deadlines, TLS. No wasm here:
tests/integration/test_outbound_guests.py sends the same through guests."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.domain.errors import ConnectionFailed, InvalidRequest, OutboundDenied, OutboundTimeout, TooLarge
from llmhost.domain.hosts import parse_allowed_hosts
from llmhost.domain.limits import MAX_OUTBOUND_BODY_BYTES
from llmhost.grants.outbound import policy
from llmhost.grants.outbound.client import OutboundClient
from llmhost.grants.outbound.messages import OutboundRequest, OutboundResponse
from llmhost.grants.outbound.policy import RequestBudget
from outbound_servers import TestServer, self_signed_certificate, serving, tls_server_context

MAX = 1024 * 1024
GENEROUS_S = 10.0  # an upper bound on something that must stop: never a speed assertion


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def client() -> Iterator[OutboundClient]:
    outbound = OutboundClient()
    yield outbound
    outbound.close()


def send(
    client: OutboundClient,
    url: str,
    grants: tuple[str, ...],
    method: str = "GET",
    headers: tuple[tuple[str, str], ...] = (),
    body: bytes | None = None,
    timeout_s: float | None = None,
    max_bytes: int = MAX,
    budget: RequestBudget | None = None,
    time_left: float | None = None,
) -> OutboundResponse:
    request = OutboundRequest(method, url, headers, body, timeout_s)
    return client.send(
        request, parse_allowed_hosts(list(grants)), "sandbox", max_response_bytes=max_bytes, budget=budget,
        time_left=time_left,
    )  # fmt: skip


def own(server: TestServer) -> tuple[str, ...]:
    return (f"http://127.0.0.1:{server.port}",)


def test_a_granted_request_gets_the_whole_response(client: OutboundClient, server: TestServer) -> None:
    reply = send(client, server.url("/echo?a=1"), own(server), "POST", (("X-Custom", "café"),), b"payload")
    assert reply.status == 200
    echoed = json.loads(reply.body)
    assert (echoed["method"], echoed["path"], echoed["body"]) == ("POST", "/echo?a=1", "payload")
    assert ["x-custom", "café".encode().decode("latin-1")] in echoed["headers"]  # http.server reads Latin-1
    assert ["host", f"127.0.0.1:{server.port}"] in echoed["headers"]
    assert ("x-test", "Value") in reply.headers and all(name == name.lower() for name, _ in reply.headers)


def test_a_non_2xx_status_is_a_response(client: OutboundClient, server: TestServer) -> None:
    reply = send(client, server.url("/status/503"), own(server))
    assert (reply.status, reply.body) == (503, b"status 503")


def test_localhost_granted_by_name(client: OutboundClient, server: TestServer) -> None:
    assert send(client, server.url("/hello", "localhost"), ("http://localhost:*",)).body == b"hello"


@pytest.mark.parametrize(
    "grants",
    [(), ("https://example.com",), ("http://*:*",), ("http://localhost:*",), ("http://127.0.0.1:1",)],
)
def test_ungranted_requests_are_denied_and_nothing_is_sent(
    client: OutboundClient, server: TestServer, grants: tuple[str, ...]
) -> None:
    before = len(server.hits)
    with pytest.raises(OutboundDenied):
        send(client, server.url("/hello"), grants)
    assert len(server.hits) == before


@pytest.mark.parametrize(
    ("method", "headers", "url"),
    [
        ("GET", (("x-a", "1\r\nx-injected: yes"),), None),
        ("GET", (("x-a\r\nx-b", "1"),), None),
        ("GET /hello HTTP/1.1", (), None),
        ("GET", (), "http://127.0.0.1:{port}/a b"),
        ("GET", (), "gopher://127.0.0.1:{port}/"),
    ],
)
def test_invalid_requests_send_nothing(
    client: OutboundClient, server: TestServer, method: str, headers: tuple[tuple[str, str], ...], url: str | None
) -> None:
    before = len(server.hits)
    with pytest.raises(InvalidRequest):
        send(client, (url or server.url("/echo")).format(port=server.port), own(server), method, headers)
    assert len(server.hits) == before


# -- SSRF: what a granted name resolves to --------------------------------------------------------------------


def test_a_name_resolving_to_a_non_public_address_is_denied_unsent(server: TestServer) -> None:
    answers = {
        "sneaky.test": ["127.0.0.1"],  # where the test server listens
        "mixed.test": ["93.184.216.34", "127.0.0.1"],
        "metadata.test": ["169.254.169.254"],
        "mapped.test": ["::ffff:127.0.0.1"],
        "private.test": ["10.1.2.3"],
    }
    outbound = OutboundClient(resolver=lambda host, port: answers[host])
    try:
        before = len(server.hits)
        for name, addresses in answers.items():
            with pytest.raises(OutboundDenied) as caught:
                send(outbound, server.url("/hello", name), (f"http://{name}:{server.port}",))
            assert f"{name} resolves to {addresses[-1]}" in caught.value.message
        assert len(server.hits) == before
    finally:
        outbound.close()


def test_the_connection_goes_to_the_checked_address(server: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name answers 127.0.0.1 (taken as public here) when checked, then a private address.
    The request goes to the address that was checked, and the name is looked up once per request."""
    real = policy.address_problem
    monkeypatch.setattr(policy, "address_problem", lambda a: None if str(a) == "127.0.0.1" else real(a))
    answers = iter([["127.0.0.1"], ["10.255.255.1"]])
    lookups: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return next(answers)

    outbound = OutboundClient(resolver=rebinding)
    try:
        grant = (f"http://rebind.test:{server.port}",)
        reply = send(outbound, server.url("/echo", "rebind.test"), grant)
        assert ["host", f"rebind.test:{server.port}"] in json.loads(reply.body)["headers"]
        assert lookups == ["rebind.test"]
        with pytest.raises(OutboundDenied, match="10.255.255.1, a private address"):
            send(outbound, server.url("/echo", "rebind.test"), grant)  # checked again, even with a pooled connection
        assert lookups == ["rebind.test", "rebind.test"]
    finally:
        outbound.close()


def test_dns_that_never_answers_times_out(server: TestServer) -> None:
    release = threading.Event()
    outbound = OutboundClient(resolver=lambda host, port: [] if release.wait(30) else [])
    try:
        started = time.monotonic()
        with pytest.raises(OutboundTimeout, match="resolving slow.test"):
            send(outbound, "http://slow.test/", ("http://slow.test",), timeout_s=0.3)
        assert time.monotonic() - started < GENEROUS_S
    finally:
        release.set()
        outbound.close()


def test_an_unresolvable_name_is_a_connection_error(client: OutboundClient) -> None:
    with pytest.raises(ConnectionFailed, match="cannot resolve no-such-host.invalid"):
        send(client, "http://no-such-host.invalid/", ("http://*.invalid",))


def test_a_port_nobody_listens_on_is_a_connection_error(client: OutboundClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionFailed, match="refused"):
        send(client, f"http://127.0.0.1:{port}/", (f"http://127.0.0.1:{port}",))


# -- redirects --------------------------------------------------------------------------------------------------


def test_redirects_are_followed_and_counted(client: OutboundClient, server: TestServer) -> None:
    budget = RequestBudget(10, "sandbox.max-outbound-requests")
    reply = send(client, server.url("/hops?n=3"), own(server), budget=budget)
    assert (reply.status, reply.body, budget.sent) == (200, b"arrived", 4)


def test_a_redirect_loop_is_too_large_after_five(client: OutboundClient, server: TestServer) -> None:
    before = len(server.hits)
    with pytest.raises(TooLarge, match="redirect loop"):
        send(client, server.url("/loop"), own(server))
    assert len(server.hits) - before == 6  # the request and its 5 redirects


def test_a_redirect_to_a_denied_host_is_denied_unsent(client: OutboundClient, server: TestServer) -> None:
    other = f"http://localhost:{server.port}/hello"  # the same server by another name: not granted
    before = len(server.hits)
    with pytest.raises(OutboundDenied, match="redirected to a host that is not granted"):
        send(client, server.url(f"/redirect?to={other}"), own(server))
    assert len(server.hits) - before == 1
    with pytest.raises(OutboundDenied, match="scheme 'file'"):
        send(client, server.url("/redirect?to=file:///etc/passwd"), own(server))


def test_307_keeps_the_method_and_body_303_does_not(client: OutboundClient, server: TestServer) -> None:
    kept = json.loads(send(client, server.url("/redirect?status=307&to=/echo"), own(server), "POST", body=b"b").body)
    assert (kept["method"], kept["body"]) == ("POST", "b")
    changed = json.loads(send(client, server.url("/redirect?status=303&to=/echo"), own(server), "POST", body=b"b").body)
    assert (changed["method"], changed["body"]) == ("GET", "")


def test_the_request_budget_stops_a_run(client: OutboundClient, server: TestServer) -> None:
    budget = RequestBudget(2, "components.app.max-outbound-requests")
    with pytest.raises(OutboundDenied, match="components.app.max-outbound-requests"):
        send(client, server.url("/hops?n=3"), own(server), budget=budget)
    assert budget.sent == 2


# -- sizes and time -----------------------------------------------------------------------------------------------


def test_a_body_at_the_limit_passes_one_byte_over_is_too_large(client: OutboundClient, server: TestServer) -> None:
    assert len(send(client, server.url(f"/big?bytes={MAX}"), own(server)).body) == MAX
    for length in ("0", "1"):  # without a content-length, it is found out while reading
        with pytest.raises(TooLarge, match="max-response-bytes"):
            send(client, server.url(f"/big?bytes={MAX + 1}&length={length}"), own(server))


def test_a_request_body_over_2_mib_is_refused_unsent(client: OutboundClient, server: TestServer) -> None:
    """The SDK refuses it before calling; a guest that calls the binding itself is refused by the host."""
    before = len(server.hits)
    with pytest.raises(InvalidRequest, match=f"over the {MAX_OUTBOUND_BODY_BYTES} bytes one request can carry"):
        send(client, server.url("/echo"), own(server), "POST", body=b"b" * (MAX_OUTBOUND_BODY_BYTES + 1))
    assert len(server.hits) == before
    at_limit = send(
        client, server.url("/echo"), own(server), "POST", body=b"b" * MAX_OUTBOUND_BODY_BYTES, max_bytes=4 * MAX
    )
    assert at_limit.status == 200 and len(json.loads(at_limit.body)["body"]) == MAX_OUTBOUND_BODY_BYTES


def test_a_50_mb_response_is_too_large_and_memory_stays_flat(client: OutboundClient, server: TestServer) -> None:
    clear_refs = Path("/proc/self/clear_refs")
    clear_refs.write_text("5")  # reset the peak (VmHWM)
    before = _status_kb("VmRSS")
    for _ in range(3):
        with pytest.raises(TooLarge):
            send(client, server.url(f"/big?bytes={50 * 1024 * 1024}&length=0"), own(server), max_bytes=10 * MAX)
    peak = _status_kb("VmHWM") - before
    assert peak < 40 * 1024, f"peak grew {peak} kB for a 10 MiB limit"
    assert send(client, server.url("/hello"), own(server)).body == b"hello"  # and it goes on


def _status_kb(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def test_a_server_that_never_answers_times_out(client: OutboundClient, server: TestServer) -> None:
    started = time.monotonic()
    with pytest.raises(OutboundTimeout, match="timeout-ms of 500"):
        send(client, server.url("/never"), own(server), timeout_s=0.5)
    assert 0.4 < time.monotonic() - started < GENEROUS_S


def test_the_runs_deadline_bounds_the_request(client: OutboundClient, server: TestServer) -> None:
    with pytest.raises(OutboundTimeout, match="the run's deadline"):
        send(client, server.url("/never"), own(server), timeout_s=60, time_left=0.5)
    before = len(server.hits)
    with pytest.raises(OutboundTimeout, match="nothing was sent"):
        send(client, server.url("/hello"), own(server), time_left=0.0)
    assert len(server.hits) == before


def test_a_trickling_body_is_cut_at_the_deadline(client: OutboundClient, server: TestServer) -> None:
    """Each byte arrives well within any per-read timeout: only a deadline on the whole exchange stops it."""
    started = time.monotonic()
    with pytest.raises(OutboundTimeout):
        send(client, server.url("/trickle?ms=20"), own(server), timeout_s=1.0)
    assert time.monotonic() - started < GENEROUS_S
    assert send(client, server.url("/hello"), own(server)).body == b"hello"


# -- TLS -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"), "localhost")


def test_an_unverifiable_certificate_is_a_connection_error(
    client: OutboundClient, tls_files: tuple[Path, Path]
) -> None:
    with serving(tls_server_context(*tls_files)) as tls, pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY"):
        send(client, tls.url("/hello", "localhost"), ("https://localhost:*",))


def test_tls_is_verified_against_the_name_while_connecting_to_the_address(tls_files: tuple[Path, Path]) -> None:
    """The certificate names `localhost` only: trusted, the request by name succeeds (connected to 127.0.0.1,
    verified as localhost); by address it fails (the certificate does not name 127.0.0.1)."""
    outbound = OutboundClient(verify=ssl.create_default_context(cafile=str(tls_files[0])))
    try:
        with serving(tls_server_context(*tls_files)) as tls:
            assert send(outbound, tls.url("/hello", "localhost"), ("https://localhost:*",)).body == b"hello"
            with pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED|IP address mismatch"):
                send(outbound, tls.url("/hello"), (f"https://127.0.0.1:{tls.port}",))
    finally:
        outbound.close()


def test_outbound_requests_are_not_logged(
    client: OutboundClient, server: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logs every URL at INFO: a token in a query string must not reach the host's log."""
    with caplog.at_level("DEBUG"):
        send(client, server.url("/hello?token=s3cret-in-url"), own(server), headers=(("authorization", "s3cret-h"),))
    assert "s3cret" not in caplog.text
