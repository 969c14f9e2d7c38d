"""One component of the `http-app` world: loaded and linked once, instantiated afresh for every request."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from wasmtime import Store, WasmtimeError
from wasmtime.component import ComponentInstanceType, FuncType

from llmhost import telemetry
from llmhost.api import Host, LoadError, check_imports, wasm_cause
from llmhost.domain.errors import LlmError
from llmhost.domain.limits import ALLOWED_MODELS_KEY, DEFAULT_MAX_LOG_BYTES
from llmhost.grants.transfers import lowered_cost
from llmhost.interfaces.http import (
    HANDLE_EXPORT,
    HANDLER_INTERFACES,
    HTTP_INTERFACES,
    WRITER_TYPE_ID,
    HttpFields,
    ResponseWriter,
    define_http,
    http_request_to_wit,
    http_response_from_wit,
    writers_of,
)
from llmhost.interfaces.linker import GRANT_INTERFACES
from llmhost.interfaces.llm import INTERFACES as LLM_INTERFACES
from llmhost.interfaces.sequences import INTERFACES as SEQUENCES_INTERFACES
from llmhost.run.scope import RunScope
from llmhost.runtime import abi
from llmhost.runtime.host_funcs import hold_until_lowered
from llmhost.runtime.sandbox import new_store
from llmhost.shell.config import ComponentSettings
from llmhost.shell.guest import TRAP, GuestFailure, GuestOutput, guest_failure

PROVIDED_INTERFACES = (*LLM_INTERFACES, *SEQUENCES_INTERFACES, *HTTP_INTERFACES, *GRANT_INTERFACES)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path_with_query: str
    headers: HttpFields
    body: bytes


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: HttpFields
    body: bytes


class HttpComponent:
    def __init__(self, host: Host, settings: ComponentSettings) -> None:
        self.settings = settings
        self.name = settings.name
        linked = host.link(
            settings.source,
            allowed_models=settings.allowed_models,
            allowed_key=settings.key(f"components.{settings.name}.{ALLOWED_MODELS_KEY}"),
            grants=settings.grants,
            extra={name: lambda instance, imported: define_http(instance, imported) for name in HTTP_INTERFACES},
        )
        self.compiled = linked.compiled
        self._transfers = host.grant_services.transfers
        self._engine, self._component, self._linker = linked.engine, linked.component, linked.linker
        handler_name = self._check()
        handler = self._component.get_export_index(handler_name)
        handle = self._component.get_export_index(HANDLE_EXPORT, handler)
        assert handle is not None  # checked above
        self._handle = handle
        self._span = {"llmhost.component": self.name}  # the component span's attributes (tracing on)
        # Requests using this component now; a component replaced by `--watch` is closed once they have ended.
        self.users = Users(self.close)

    def enter(self) -> None:
        """A request is routed to this component (on the event loop, where `swap` runs: none is lost between)."""
        self.users.enter()

    def leave(self) -> None:
        """That request's guest has ended (or never ran)."""
        self.users.leave()

    def retire(self) -> None:
        """Replaced (`--watch`): closed now if no request uses it, else when the last one ends."""
        self.users.retire()

    def close(self) -> None:
        """Free the linker (the host's functions for this component); its compiled code is freed with this object
        (the host's cache holds it weakly), and going back to these sources deserializes it from the disk cache."""
        self._linker.close()

    def _check(self) -> str:
        """Check the exports and imports; returns the name of the handler interface (of whichever version)."""
        source = self.settings.source
        exports = self._component.type.exports(self._engine)
        for name in reversed(HANDLER_INTERFACES):
            handler = exports.get(name)
            instance_type = handler.ty if handler is not None else None
            functions = instance_type.exports(self._engine) if isinstance(instance_type, ComponentInstanceType) else {}
            if HANDLE_EXPORT in functions and isinstance(functions[HANDLE_EXPORT].ty, FuncType):
                check_imports(source, self._component, self._engine, PROVIDED_INTERFACES)
                return name
        raise LoadError(
            f"{source}: the component does not export `{HANDLER_INTERFACES[-1]}` with `{HANDLE_EXPORT}` (it must "
            "target the `http-app` world of wit/http.wit: `llmhost build DIR -o APP.wasm --world http-app`)"
        )

    def handle(
        self,
        request: HttpRequest,
        writer: ResponseWriter,
        deadline_s: float,
        request_id: str = "-",
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        scope: RunScope | None = None,
        on_log_dropped: Callable[[], None] = lambda: None,
    ) -> HttpResponse:
        """Run `handler.handle` in a fresh instance (on the calling thread) that may run for `deadline_s`.

        Raises `GuestFailure` when the guest traps, runs out of memory or past its deadline. What the guest
        writes to stdout and stderr is logged, each line one record prefixed with the component and
        `request_id` (so a guest cannot forge the server's own lines), at most `max_log_bytes` of it; past that,
        `on_log_dropped()` is called once.
        """
        output = GuestOutput(self.name, request_id, max_log_bytes)
        sandbox = self.settings.sandbox.model_copy(update={"timeout_s": max(deadline_s, 0.001)})
        # The request's scope (its cancellation and token budget come from the server) owns what the guest opens,
        # its response writer included.
        scope = scope if scope is not None else RunScope(f"request to {self.name}")
        rep = writers_of(scope).register(writer)
        store: Store | None = None
        try:
            store = new_store(
                self._engine, sandbox, [self.name], stdout=output.stdout, stderr=output.stderr, scope=scope
            )
            try:
                instance = self._linker.instantiate(store, self._component)
            except WasmtimeError as error:
                raise GuestFailure(500, f"{self.name} cannot be instantiated: {wasm_cause(str(error))}", TRAP) from None
            handle = instance.get_func(store, self._handle)
            assert handle is not None  # checked at load
            request_value = http_request_to_wit(request.method, request.path_with_query, request.headers, request.body)
            self._reserve_body(store, len(request.body), deadline_s)
            try:
                writer_handle = abi.borrow_resource(rep, WRITER_TYPE_ID)
                value = telemetry.call(
                    f"component {self.name}", self._span, handle, store, request_value, writer_handle
                )
                handle.post_return(store)
            except WasmtimeError as error:
                raise guest_failure(self.settings, str(error), output.stderr_text()) from None
            status, headers, body = http_response_from_wit(value)
            return HttpResponse(status, headers, body)
        finally:
            # The request is over: what the guest still holds is freed before the next request is admitted,
            # and the instance's memory with the store (a trap's reference cycle would otherwise keep it).
            scope.close()
            if store is not None:
                store.close()
            if output.log():
                on_log_dropped()

    def _reserve_body(self, store: Store, size: int, deadline_s: float) -> None:
        """The host memory that handing the request body to the guest takes (grants/transfers.py), reserved within the
        request's deadline and held until the guest runs; 503 naming the budget's key when it cannot be had."""
        if not size:
            return
        try:
            cost = self._transfers.reserve(lowered_cost(size), f"the {size}-byte request body", max(0.0, deadline_s))
        except LlmError as error:
            raise GuestFailure(503, error.message) from None  # the host is busy, not the guest at fault
        hold_until_lowered(store, lambda: self._transfers.release(cost))


def _nothing() -> None:
    pass


class Users:
    """The requests using a component, counted: once it is retired and the last of them has ended, `close` is called
    (once). Any thread may call these (a guest ends on a worker thread)."""

    def __init__(self, close: Callable[[], None]) -> None:
        self._close = close
        self._count = 0
        self._retired = False
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self._count += 1

    def leave(self) -> None:
        with self._lock:
            self._count -= 1
            close = self._retired and self._count == 0
        if close:
            self._closed()

    def retire(self) -> None:
        with self._lock:
            close = not self._retired and self._count == 0
            self._retired = True
        if close:
            self._closed()

    def _closed(self) -> None:
        # `close` is the component's bound method: dropped once called, so no reference cycle keeps the component
        # (and its ~53 MB of compiled code) alive until a full garbage collection (issue 66).
        close, self._close = self._close, _nothing
        close()

    @property
    def count(self) -> int:
        return self._count
