"""What the call sites see of a span, and the tracer behind the facade (telemetry/otel.py is the real one)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from llmhost.domain.types import Usage

T = TypeVar("T")


class Span:
    """A span as call sites use it; this base does nothing (tracing off)."""

    def set(self, key: str, value: Any) -> None:
        """An attribute (None: not set)."""

    def fail(self, message: str) -> None:
        """The span's work failed with this (one-line) reason."""


NOOP_SPAN = Span()
Attributes = dict[str, Any] | None
Headers = Sequence[tuple[str, str]]  # (name, value) pairs: HTTP headers, or an MCP request's trace fields
TRACE_FIELDS = ("traceparent", "tracestate")  # W3C trace context: HTTP headers, or an MCP request's `_meta`


@dataclass(frozen=True)
class ModelWork:
    """A generation's work, for its spans: its `time.monotonic()` marks (submitted, admitted, first token, ended;
    0: not reached), its usage and finish reason, and the prompt tokens it reused from a cache."""

    model: str
    times: tuple[float, float, float, float]
    usage: Usage
    finish_reason: str | None
    reused_tokens: int


class Tracer(Protocol):
    def span(
        self, name: str, attributes: Attributes, server: bool = False, carrier: Headers = ()
    ) -> contextlib.AbstractContextManager[Span]: ...

    def server_span(
        self, method: str, path: str, headers: Headers, attributes: Attributes
    ) -> contextlib.AbstractContextManager[Span]: ...

    def capture(self) -> object: ...

    def host_call(self, interface: str, name: str, function: Callable[..., T]) -> Callable[..., T]: ...

    def stream(self, name: str, model: str, params: Any, open_stream: Callable[[], T]) -> T: ...

    def model_work(self, parent: object, work: ModelWork) -> None: ...

    def inject(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]: ...

    def shutdown(self) -> None: ...
