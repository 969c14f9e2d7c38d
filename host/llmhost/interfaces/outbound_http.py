"""The host side of `llmhost:llm/outbound-http` (wit/outbound-http.wit, 0.2.3 and 0.2.4): `send`, and 0.2.4's
`send-streamed` with its `incoming-body`, through the component's `allowed-outbound-hosts` grant (`grants.outbound`).

The request runs on the guest's thread and never outlives the run: its timeout is cut to the run's time left
(`RunScope.time_left`), cancelling the run (its client left, the server stops) stops a request in progress at once
(`Cancellation`), and a cancelled run sends nothing more. The requests a run may send in all
(`max-outbound-requests`) are counted in its run scope.

Handing bytes into a guest costs the host ~80 bytes a byte while wasmtime copies them (grants/transfers.py): `send`'s
whole body and each `incoming-body.read` chunk reserve that cost in the host-wide budget first, held until the guest
runs again (`hold_until_lowered`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, Record, ResourceHost, ResourceType

from llmhost.domain.limits import MAX_BODY_READ_BYTES
from llmhost.grants import Grants, GrantServices
from llmhost.grants.outbound.cancel import Cancellation
from llmhost.grants.outbound.messages import OutboundRequest, OutboundResponse
from llmhost.grants.outbound.policy import RequestBudget
from llmhost.interfaces.handover import hand_over
from llmhost.interfaces.http import http_fields_from_wit, http_fields_to_wit
from llmhost.interfaces.versions import interface_names
from llmhost.run.scope import HandleTable
from llmhost.runtime import abi
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

# Served from 0.2.3 on (earlier versions have no such interface: their names are never imported).
INTERFACES = interface_names("outbound-http", since="0.2.3")
_BUDGET_TABLE = "outbound-requests"
_BODIES_TABLE = "outbound-bodies"
BODY_TYPE_ID = 211


@dataclass
class IncomingBody:
    """A received body, handed to the guest in chunks: what was read so far."""

    data: bytes
    offset: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, most: int) -> bytes:
        with self.lock:
            chunk = self.data[self.offset : self.offset + most]
            self.offset += len(chunk)
            if self.offset >= len(self.data):
                self.data = b""  # all read: the handle keeps nothing
                self.offset = 0
            return chunk


def bodies(store: Any) -> HandleTable[IncomingBody]:
    return scope_of(store).table(_BODIES_TABLE, lambda: HandleTable[IncomingBody]("incoming body"), _drained)


def _drained(table: HandleTable[IncomingBody]) -> None:
    table.drain()


def define_outbound_http(
    instance: LinkerInstance, grants: Grants, services: GrantServices, imported: dict[str, FuncType]
) -> None:
    limit_key = f"{grants.key}.max-outbound-requests"
    transfers = services.transfers

    def exchange(store: Any, request: Any) -> OutboundResponse:
        scope = scope_of(store)
        scope.check()  # a stopped run (deadline passed, client gone) sends nothing more
        budget = scope.table(
            _BUDGET_TABLE, lambda: RequestBudget(grants.max_outbound_requests, limit_key), lambda _budget: None
        )
        cancellation = Cancellation()
        scope.attach(cancellation)  # cancelled with the run, as its generations are (at once, if it already was)
        try:
            return services.outbound(grants.key).send(
                outbound_request_from_wit(request),
                grants.allowed_hosts,
                grants.key,
                max_response_bytes=grants.max_response_bytes,
                budget=budget,
                time_left=scope.time_left(),
                cancellation=cancellation,
            )
        finally:
            scope.detach(cancellation)

    def send(store: Any, request: Any) -> OutboundResponse:
        response = exchange(store, request)
        hand_over(store, transfers, len(response.body), f"a {len(response.body)}-byte response body")
        return response

    def send_streamed(store: Any, request: Any) -> Any:
        response = exchange(store, request)
        handle = abi.own_resource(bodies(store).add(IncomingBody(response.body)), BODY_TYPE_ID)
        return streamed_response_to_wit(response, handle)

    def read(store: Any, handle: Any, most: int) -> bytes:
        body = bodies(store).get(abi.resource_rep(store, handle))
        chunk = body.take(max(1, min(int(most), MAX_BODY_READ_BYTES)))
        hand_over(store, transfers, len(chunk), f"a {len(chunk)}-byte body chunk")
        return chunk

    if "send-streamed" in imported:
        instance.add_resource("incoming-body", ResourceType.host(BODY_TYPE_ID), _dropped)
    identity = lambda value: value  # noqa: E731
    abi.define_functions(
        instance,
        imported,
        {
            "send": (send, outbound_response_to_wit),
            "send-streamed": (send_streamed, identity),
            "[method]incoming-body.read": (read, identity),
        },
        scrub=grants.scrub,
        traced="outbound-http",
    )


def _dropped(store: Any, rep: int) -> None:
    try:
        bodies(store).pop(rep)
    except Exception:  # a run that has ended has nothing left to free; dropping must never trap
        _log.debug("dropping incoming body %d after its run ended", rep)


# -- converters (wit/outbound-http.wit): the request a guest sends, the response it gets --


def outbound_request_from_wit(value: Any) -> OutboundRequest:
    """The WIT `outbound-http.request` record -> `OutboundRequest` (checked by `grants.outbound.policy`)."""
    timeout_ms = getattr(value, "timeout-ms")
    return OutboundRequest(
        method=str(value.method),
        url=str(value.url),
        headers=tuple(http_fields_from_wit(value.headers)),
        body=None if value.body is None else bytes(value.body),
        timeout_s=None if timeout_ms is None else int(timeout_ms) / 1000,
    )


def outbound_response_to_wit(response: OutboundResponse) -> Record:
    return abi.record(
        {
            "status": response.status,
            "headers": http_fields_to_wit(response.headers),
            "body": bytes(response.body),
        }
    )


def streamed_response_to_wit(response: OutboundResponse, body: ResourceHost) -> Record:
    """0.2.4's `streamed-response`: the status and headers, the body as an `incoming-body` handle."""
    return abi.record({"status": response.status, "headers": http_fields_to_wit(response.headers), "body": body})
