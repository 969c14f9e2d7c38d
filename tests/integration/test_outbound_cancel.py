"""Cancelling a run stops the outbound request its guest waits on (issue 54): wherever the request waits (DNS, a
connect, a TLS handshake, a response), it ends at once with `connection` naming why, not at its deadline. The
cancel comes from a `RunScope`, as serve's does when the client disconnects."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from llmhost.domain.errors import ConnectionFailed
from llmhost.domain.hosts import parse_allowed_hosts
from llmhost.grants.outbound.cancel import Cancellation
from llmhost.grants.outbound.client import OutboundClient
from llmhost.grants.outbound.messages import OutboundRequest, OutboundResponse
from llmhost.run.scope import RunScope
from outbound_servers import TestServer, serving

WAIT_S = 20.0  # each request's own timeout: what it would wait if the cancel did not stop it
PROMPT_S = 3.0  # an upper bound on stopping: never a speed assertion
REASON = "the client disconnected"


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def client() -> Iterator[OutboundClient]:
    release = threading.Event()
    outbound = OutboundClient(resolver=lambda host, port: ["127.0.0.1"] if release.wait(60) else [])
    yield outbound
    release.set()
    outbound.close()


def send(client: OutboundClient, url: str, grant: str, cancellation: Cancellation) -> OutboundResponse:
    request = OutboundRequest("GET", url, timeout_s=WAIT_S)
    grants = parse_allowed_hosts([grant])
    return client.send(request, grants, "sandbox", max_response_bytes=2**21, cancellation=cancellation)


def stopped_by_cancel(call: Callable[[Cancellation], object]) -> str:
    """Run `call` in a scope that is cancelled 0.3 s later; the error's message, once it stopped."""
    scope, cancellation, outcome = RunScope(), Cancellation(), []
    scope.attach(cancellation)

    def run() -> None:
        try:
            call(cancellation)
        except ConnectionFailed as error:
            outcome.append(error.message)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    cancelled = time.monotonic()
    scope.cancel(REASON)
    thread.join(WAIT_S)
    assert time.monotonic() - cancelled < PROMPT_S, "the request went on after its run was cancelled"
    assert outcome and REASON in outcome[0], outcome
    return outcome[0]


def test_a_response_that_never_comes(client: OutboundClient, server: TestServer) -> None:
    grant = f"http://127.0.0.1:{server.port}"
    message = stopped_by_cancel(lambda c: send(client, server.url("/never"), grant, c))
    assert message.startswith(f"the request to {grant} was stopped")
    # The same client goes on (the cancel shut down only the cancelled request's connection).
    assert send(client, server.url("/hello"), grant, Cancellation()).body == b"hello"


def test_a_trickling_body(client: OutboundClient, server: TestServer) -> None:
    grant = f"http://127.0.0.1:{server.port}"
    stopped_by_cancel(lambda c: send(client, server.url("/trickle?ms=20"), grant, c))


def test_a_lookup_that_never_answers(client: OutboundClient) -> None:
    stopped_by_cancel(lambda c: send(client, "http://hangs.test/", "http://hangs.test", c))


def test_a_connect_nobody_accepts() -> None:
    """A listener whose queue is full: the kernel drops the next SYN, and connect() waits."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        outbound = OutboundClient()
        try:
            grant = f"http://127.0.0.1:{port}"
            stopped_by_cancel(lambda c: send(outbound, f"{grant}/", grant, c))
        finally:
            outbound.close()
            for filler in fillers:
                filler.close()


def test_a_tls_handshake_that_never_ends() -> None:
    """A listener that never accepts: the connection is made (by the kernel), the handshake never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        outbound = OutboundClient()
        try:
            grant = f"https://localhost:{port}"
            stopped_by_cancel(lambda c: send(outbound, f"{grant}/", grant, c))
        finally:
            outbound.close()


def test_a_request_of_a_cancelled_run_sends_nothing(client: OutboundClient, server: TestServer) -> None:
    cancellation = Cancellation()
    cancellation.cancel(REASON)
    before = len(server.hits)
    with pytest.raises(ConnectionFailed, match=REASON):
        send(client, server.url("/hello"), f"http://127.0.0.1:{server.port}", cancellation)
    assert len(server.hits) == before
