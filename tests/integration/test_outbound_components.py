"""What one component's outbound requests leave behind for others (issue 54), against real servers on loopback
(tests/outbound_servers.py): no cookies are kept at all; each component has its own connections (kept alive between
its own requests), so an upstream that breaks a connection breaks it for that component only; each has its own DNS
threads, so its hung lookups never delay another's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmhost.domain.errors import ConnectionFailed
from llmhost.domain.hosts import parse_allowed_hosts
from llmhost.grants import GrantServices
from llmhost.grants.outbound import policy
from llmhost.grants.outbound.client import OutboundClient
from llmhost.grants.outbound.clients import OutboundClients
from llmhost.grants.outbound.messages import OutboundRequest, OutboundResponse
from outbound_servers import TestServer, serving, wait_for

MAX = 1024 * 1024


@pytest.fixture
def server() -> Iterator[TestServer]:  # one per test: its connection count starts at 0
    with serving() as running:
        yield running


@pytest.fixture
def clients() -> Iterator[OutboundClients]:
    running = OutboundClients()
    yield running
    running.close()


def get(client: OutboundClient, url: str, grant: str, timeout_s: float | None = None) -> OutboundResponse:
    request = OutboundRequest("GET", url, timeout_s=timeout_s)
    return client.send(request, parse_allowed_hosts([grant]), "sandbox", max_response_bytes=MAX)


def own(server: TestServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def sent_headers(reply: OutboundResponse) -> dict[str, str]:
    return {name: value for name, value in json.loads(reply.body)["headers"]}


def test_no_cookie_is_kept(clients: OutboundClients, server: TestServer) -> None:
    """A `set-cookie` is never sent back: not by the component that got it, not by another."""
    a, b = clients.for_component("components.a"), clients.for_component("components.b")
    for host in ("127.0.0.1", "localhost"):
        grant = f"http://{host}:{server.port}"
        assert "set-cookie" in dict(get(a, server.url("/set-cookie", host), grant).headers)
        for client in (a, b):
            assert "cookie" not in sent_headers(get(client, server.url("/echo", host), grant))


def test_a_guests_own_cookie_header_is_sent(clients: OutboundClients, server: TestServer) -> None:
    request = OutboundRequest("GET", server.url("/echo"), (("cookie", "mine=1"),))
    reply = clients.for_component("sandbox").send(request, parse_allowed_hosts([own(server)]), "sandbox",
                                                  max_response_bytes=MAX)  # fmt: skip
    assert sent_headers(reply)["cookie"] == "mine=1"


def test_a_component_keeps_its_connection_alive(clients: OutboundClients, server: TestServer) -> None:
    a = clients.for_component("components.a")
    for _ in range(5):
        assert get(a, server.url("/hello"), own(server)).body == b"hello"
    assert (len(server.hits), server.connections) == (5, 1)
    assert get(clients.for_component("components.b"), server.url("/hello"), own(server)).status == 200
    assert server.connections == 2  # b's own


def test_a_broken_connection_stays_in_its_component(clients: OutboundClients, server: TestServer) -> None:
    """An upstream's 304 carries a body it must not: the connection it came on is garbage from there on. It goes
    back to component a's pool; component b's next request to the same origin is not sent on it."""
    a, b = clients.for_component("components.a"), clients.for_component("components.b")
    assert get(a, server.url("/bad304"), own(server)).status == 304
    assert get(b, server.url("/hello"), own(server)).body == b"hello"
    try:
        get(a, server.url("/hello"), own(server))  # a's next one may fail: its upstream broke its connection
    except ConnectionFailed as error:
        assert "illegal status line" in error.message
    assert get(a, server.url("/hello"), own(server)).body == b"hello"  # and it recovers: a new connection


def test_hung_lookups_delay_only_their_own_component(
    clients: OutboundClients, server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Component a's lookups hang, as many as it has DNS threads and one more; component b's lookup is answered."""
    real = policy.address_problem
    monkeypatch.setattr(policy, "address_problem", lambda a: None if str(a) == "127.0.0.1" else real(a))
    release = threading.Event()
    hung: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        if host == "slow.test":
            hung.append(host)
            release.wait(30)
        return ["127.0.0.1"]

    outbound = OutboundClients(resolver=resolver)
    a, b = outbound.for_component("components.a"), outbound.for_component("components.b")
    slow, fast = f"http://slow.test:{server.port}", f"http://fast.test:{server.port}"
    try:
        with ThreadPoolExecutor(5) as pool:
            waiting = [pool.submit(get, a, f"{slow}/hello", slow, 20) for _ in range(5)]
            assert wait_for(lambda: len(hung) == 4)
            assert get(b, f"{fast}/hello", fast, timeout_s=2).body == b"hello"
            release.set()
            assert [future.result().status for future in waiting] == [200] * 5
    finally:
        release.set()
        outbound.close()


def test_grant_services_hand_each_component_its_own_client(tmp_path: Path) -> None:
    services = GrantServices({}, tmp_path)
    a = services.outbound("components.a")
    assert services.outbound("components.a") is a
    assert services.outbound("components.b") is not a
    services.close()
    with pytest.raises(ConnectionFailed, match="shutting down"):
        services.outbound("components.a")
