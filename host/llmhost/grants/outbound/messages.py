"""An outbound request and its response, as the host handles them (`interfaces.outbound_http`
converts them to and from WIT)."""

from __future__ import annotations

from dataclasses import dataclass

Fields = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class OutboundRequest:
    method: str
    url: str
    headers: Fields = ()
    body: bytes | None = None
    timeout_s: float | None = None  # the guest's own timeout (`timeout-ms`); the host's limits apply as well


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    headers: Fields  # names lower-case, in the order received
    body: bytes

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name), None)
