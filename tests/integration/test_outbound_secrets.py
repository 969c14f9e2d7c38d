"""No error message of the outbound client quotes what may be secret in a request (issue 54): a URL's query and
its user name and password, a header's value. Every kind of failure, against real servers on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from llmhost.domain.errors import LlmError
from llmhost.domain.hosts import parse_allowed_hosts
from llmhost.grants.outbound.client import OutboundClient
from llmhost.grants.outbound.messages import OutboundRequest
from outbound_servers import TestServer, serving

SECRETS = ("SECRET-in-query", "PASSWORD-in-url", "TOKEN-in-header")
QUERY = "?token=SECRET-in-query&b=1"
USER = "user:PASSWORD-in-url@"


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def client() -> Iterator[OutboundClient]:
    outbound = OutboundClient(resolver=lambda host, port: [])  # a name resolves to nothing: `connection`
    yield outbound
    outbound.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cases(port: int) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(kind, URL, headers) of requests that fail, each in its own way."""
    here = f"http://127.0.0.1:{port}"
    redirect = f"{here}/redirect?to="
    return [
        ("invalid-request", f"http://{USER}127.0.0.1:{port}/hello{QUERY}", ()),
        ("invalid-request", f"{here}/a b{QUERY}", ()),
        ("invalid-request", f"http://{USER}127.0.0.1:99999/{QUERY}", ()),
        ("invalid-request", f"http://{USER}127.0.0.1:x@/{QUERY}", ()),
        ("invalid-request", f"gopher://{USER}127.0.0.1:{port}/{QUERY}", ()),
        ("invalid-request", f"{here}/echo{QUERY}", (("authorization", " Bearer TOKEN-in-header"),)),
        ("invalid-request", f"{here}/echo{QUERY}", (("x-a", "TOKEN-in-header\r\nx-b: 1"),)),
        ("denied", f"http://localhost:{port}/hello{QUERY}", ()),
        ("timeout", f"{here}/never{QUERY}", ()),
        ("connection", f"http://127.0.0.1:{closed_port()}/{QUERY}", ()),
        ("connection", f"http://nowhere.test:{port}/{QUERY}", ()),
        ("too-large", f"{here}/loop{QUERY}", ()),
        ("denied", f"{redirect}http://localhost:{port}/x%3Ftoken%3DSECRET-in-query", ()),
        ("denied", f"{redirect}gopher://{USER}127.0.0.1/x%3Ftoken%3DSECRET-in-query", ()),
        ("denied", f"{redirect}http://{USER}%5Bbad/x%3Ftoken%3DSECRET-in-query", ()),
        ("connection", f"{redirect}http://127.0.0.1:xx/x%3Ftoken%3DSECRET-in-query", ()),  # a malformed location
    ]


def test_no_message_quotes_a_secret(client: OutboundClient, server: TestServer) -> None:
    grants = parse_allowed_hosts(["http://127.0.0.1:*", "http://nowhere.test:*"])
    for kind, url, headers in cases(server.port):
        with pytest.raises(LlmError) as caught:
            client.send(OutboundRequest("GET", url, headers, timeout_s=0.3), grants, "sandbox", max_response_bytes=1)
        message = caught.value.message
        assert caught.value.kind == kind, (url, message)
        assert not [secret for secret in SECRETS if secret in message], (url, message)
