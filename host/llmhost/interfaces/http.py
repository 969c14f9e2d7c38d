"""The host side of the WIT interface `llmhost:llm/http@0.1.0` (wit/http.wit): the `response-writer` resource.

A writer is lent to the guest (a `borrow` handle) for one `handler.handle` call. The host registers the object
that really sends bytes (`ResponseWriter`, implemented by the server) in a `WriterTable` under an integer, passes
that integer as the handle's rep, and unregisters it when the call returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from wasmtime import _ffi as ffi
from wasmtime.component import FuncType, LinkerInstance, Record, ResourceType

from llmhost.domain.errors import LlmError
from llmhost.interfaces.versions import current, interface_names
from llmhost.run.scope import HandleTable, RunScope
from llmhost.runtime import abi
from llmhost.runtime.host_funcs import add_func
from llmhost.runtime.sandbox import deadline_ticks, scope_of

# -- HTTP (wit/http.wit): requests, responses and the response-writer handle -------------------------------------

HttpFields = list[tuple[str, str]]


def http_request_to_wit(method: str, path_with_query: str, headers: HttpFields, body: bytes) -> Record:
    """The WIT `http.request` record passed to `handler.handle`."""
    return abi.record(
        {
            "method": abi.string_to_wit(method),
            "path-with-query": abi.string_to_wit(path_with_query),
            "headers": http_fields_to_wit(headers),
            "body": bytes(body),
        }
    )


def http_fields_from_wit(value: Any) -> HttpFields:
    """`fields` (a list of string pairs) -> a list of `(name, value)` tuples."""
    return [(str(name), str(field_value)) for name, field_value in value]


def http_fields_to_wit(fields: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """`(name, value)` pairs -> WIT `fields` (`http` and `outbound-http` alike)."""
    return [(abi.string_to_wit(name), abi.string_to_wit(value)) for name, value in fields]


def http_response_from_wit(value: Any) -> tuple[int, HttpFields, bytes]:
    """The `http.response` record `handler.handle` returned -> (status, headers, body)."""
    return int(value.status), http_fields_from_wit(value.headers), bytes(value.body)


HTTP_INTERFACES = interface_names("http")
HANDLER_INTERFACES = interface_names("handler")
HTTP_INTERFACE = current("http")
HANDLER_INTERFACE = current("handler")
HANDLE_EXPORT = "handle"

# Host resource type id of `response-writer` (distinct from the llm interface's ids; any unused integer works).
WRITER_TYPE_ID = 101


class WriteClosed(LlmError):
    """`write-error::closed`: the client is gone or the deadline passed; nothing more can be sent."""

    kind = "closed"


class WriteInvalid(LlmError):
    """`write-error::invalid`: a call out of order or with arguments HTTP does not allow."""

    kind = "invalid"


class ResponseWriter(Protocol):
    """What a `response-writer` handle stands for. Both methods block until the bytes are handed to the
    connection and raise `WriteClosed` or `WriteInvalid`."""

    def start(self, status: int, headers: HttpFields) -> None: ...

    def write(self, chunk: bytes) -> None: ...

    def time_left_ms(self) -> int:
        """Milliseconds before the request's deadline (0 when it has passed). Never raises."""
        ...

    def run_budget_s(self) -> float | None:
        """How much longer the guest's instance may run, read after each successful start/write (a streamed
        response that makes progress earns more time); None: unchanged. Never raises."""
        ...


class WriterTable(HandleTable["ResponseWriter"]):
    """Writers lent to a run's guest, by handle rep: a table in the request's run scope (`writers_of`), closed
    with it."""

    def __init__(self) -> None:
        super().__init__("response writer")

    def register(self, writer: ResponseWriter) -> int:
        return self.add(writer)

    def unregister(self, rep: int) -> None:
        self.pop(rep)

    def get(self, rep: int) -> ResponseWriter:
        writer = self.find(rep)
        if writer is None:  # only possible if a guest kept a borrowed handle past its call, which WIT forbids
            raise WriteClosed("this response writer belongs to a request that has ended")
        return writer


def writers_of(scope: RunScope) -> WriterTable:
    """The response writers of a request's run scope (forgotten with it: the writers are the server's)."""
    table: WriterTable = scope.table("writers", WriterTable, lambda writers: writers.drain())
    return table


def define_http(instance: LinkerInstance, imported: dict[str, FuncType]) -> None:
    """Register the `http` interface's resource and methods, typed by the component's own imports."""

    def start(store: Any, this: Any, status: int, headers: Any) -> None:
        writer = writers_of(scope_of(store)).get(abi.resource_rep(store, this))
        writer.start(status, http_fields_from_wit(headers))
        _extend_epoch(store, writer)

    def write(store: Any, this: Any, chunk: bytes) -> None:
        writer = writers_of(scope_of(store)).get(abi.resource_rep(store, this))
        writer.write(bytes(chunk))
        _extend_epoch(store, writer)

    methods: dict[str, Callable[..., None]] = {
        "[method]response-writer.start": start,
        "[method]response-writer.write": write,
    }
    # Borrowed handles only: the guest never owns a writer, so there is nothing to free when one is dropped.
    instance.add_resource("response-writer", ResourceType.host(WRITER_TYPE_ID), lambda _store, _rep: None)
    for name, func_type in imported.items():
        if name in methods:
            encoder = abi.ResultEncoder.from_wit(func_type.result)
            add_func(instance, name, abi.guarded(methods[name], lambda _: None, encoder, with_store=True), func_type)
        elif name == "[method]response-writer.time-left-ms":
            add_func(instance, name, lambda store, this: _time_left_ms(store, this), func_type)


def _extend_epoch(store: Any, writer: ResponseWriter) -> None:
    """Move the instance's interruption (epoch deadline) to the writer's budget: the store was created with the
    time to the first byte, and a response that keeps streaming must not be stopped by it."""
    budget = writer.run_budget_s()
    if budget is not None:
        # `store` is the calling instance's store context (a host call runs inside it).
        ffi.wasmtime_context_set_epoch_deadline(store._context(), deadline_ticks(budget))


def _time_left_ms(store: Any, this: Any) -> int:
    try:
        return max(0, int(writers_of(scope_of(store)).get(abi.resource_rep(store, this)).time_left_ms()))
    except Exception:  # no error case in the WIT: a writer of an ended request has no time left
        return 0
