"""The host side of `llmhost:llm/outbound-http` (wit/outbound-http.wit, 0.2.3): `send`, through the component's
`allowed-outbound-hosts` grant (`grants.outbound`).

The request runs on the guest's thread and never outlives the run: its timeout is cut to the run's time left
(`RunScope.time_left`), and a run whose client left or whose deadline passed sends nothing more. The requests a
run may send in all (`max-outbound-requests`) are counted in its run scope.
"""

from __future__ import annotations

from typing import Any

from wasmtime.component import FuncType, LinkerInstance

from llmhost.grants import Grants, GrantServices
from llmhost.grants.outbound.policy import RequestBudget
from llmhost.interfaces.versions import interface_names
from llmhost.runtime import abi
from llmhost.runtime.sandbox import scope_of

# Served from 0.2.3 on (earlier versions have no such interface: their names are never imported).
INTERFACES = interface_names("outbound-http")[-1:]
_BUDGET_TABLE = "outbound-requests"


def define_outbound_http(
    instance: LinkerInstance, grants: Grants, services: GrantServices, imported: dict[str, FuncType]
) -> None:
    limit_key = f"{grants.key}.max-outbound-requests"

    def send(store: Any, request: Any) -> Any:
        scope = scope_of(store)
        scope.check()  # a stopped run (deadline passed, client gone) sends nothing more
        budget = scope.table(
            _BUDGET_TABLE, lambda: RequestBudget(grants.max_outbound_requests, limit_key), lambda _budget: None
        )
        return services.client.send(
            abi.outbound_request_from_wit(request),
            grants.allowed_hosts,
            grants.key,
            max_response_bytes=grants.max_response_bytes,
            budget=budget,
            time_left=scope.time_left(),
        )

    abi.define_functions(instance, imported, {"send": (send, abi.outbound_response_to_wit)})
