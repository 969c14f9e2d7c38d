"""The calls of `llmhost mcp`, transport-neutral: `ToolServer` runs a tool call with its component's limits, and
`mcp_server` answers the protocol's tools/list and tools/call with it (the official `mcp` SDK's low-level server).

Each call runs on a worker thread (at most `max-concurrency` at once) in a fresh instance, with serve's limits: the
component's deadline, its token budget and memory, its `allowed-models`. Generations of concurrent calls batch on
the model like any other callers'. A `notifications/cancelled`, or over HTTP the client's connection closing,
cancels the call's run scope, which stops its generations before their next decode step (counted 499, as serve
counts a client that left); a call that carries a `progressToken` is told the tokens generated so far while it
runs. `tools/list` reads the descriptions made when the components were loaded. At shutdown `drain` lets the calls
in flight go on for the grace, then stops them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from llmhost import telemetry
from llmhost.api import Host
from llmhost.domain.limits import SHUTDOWN_CANCEL_MARGIN_S
from llmhost.mcp.schema import answer_type, object_schema, output_schema
from llmhost.mcp.tools import ToolAnswer, ToolComponent, ToolSpec, clip, tool_specs
from llmhost.run.scope import RunScope, TokenBudget
from llmhost.shell.config import ServeSettings
from llmhost.shell.front import BODY_BYTES, CLIENT_GONE
from llmhost.shell.guest import CLIENT_CLOSED_STATUS, LOG_DROPPED
from llmhost.shell.metrics import RequestObserver
from llmhost.telemetry.span import TRACE_FIELDS

_log = logging.getLogger("llmhost.mcp")

PROGRESS_INTERVAL_S = 0.1  # how often a call's progress (tokens generated) is looked at
SERVER_NAME = "llmhost"
CANCELLED = "the client cancelled the tool call"
CLIENT_GONE_REASON = "the client disconnected"
SHUTTING_DOWN = "the server is shutting down"
SERVER_ERROR = -32000  # JSON-RPC's implementation-defined server error: a call the server stopped (shutdown)
CANCEL_WAIT_S = 0.05  # a cancelled call's thread is looked at this often until it has closed its instance


@dataclass
class CallStats:
    """What the server counted, for its log line at exit and for tests."""

    calls: int = 0
    errors: int = 0
    cancelled: int = 0


class ToolServer:
    """The tools of every configured component, and how to call them (transport-neutral)."""

    def __init__(self, host: Host, settings: ServeSettings, observer: RequestObserver | None = None) -> None:
        self.host = host
        self.settings = settings
        self.observer = observer or RequestObserver()  # serve's metrics, tool calls counted as requests
        self.components = {name: ToolComponent(host, s) for name, s in settings.components.items()}
        self.specs = {spec.name: spec for spec in tool_specs(self.components.values())}
        self._limiter = anyio.CapacityLimiter(settings.max_concurrency)
        self._ids = itertools.count(1)
        self.stats = CallStats()
        # Calls in flight: each one's run scope, and the cancel scope that stops waiting for its guest (shutdown).
        self._calls: dict[RunScope, anyio.CancelScope] = {}
        self._guests = 0  # guests running on their threads now
        self._guests_lock = threading.Lock()
        self.stopping: str | None = None  # why new calls are refused (the server is shutting down)
        # The clients' connections (`--watch` tells them when the tools change): each is added at its requests.
        self.clients: weakref.WeakSet[Any] = weakref.WeakSet()
        self._notifications: set[asyncio.Task[None]] = set()

    def swap(self, name: str, component: ToolComponent) -> None:
        """Put a rebuilt component in service (`--watch`, on the event loop): calls from now on get it, those in
        flight finish on the old one. When the tools it exports changed, every client is sent
        `notifications/tools/list_changed`."""
        before = self._listing()
        self.components[name] = component
        self.specs = {spec.name: spec for spec in tool_specs(self.components.values())}
        if self._listing() != before:
            _log.info("the tools changed: %s", ", ".join(self.specs) or "none")
            task = asyncio.ensure_future(self._tools_changed())
            self._notifications.add(task)
            task.add_done_callback(self._notifications.discard)

    def _listing(self) -> list[dict[str, Any]]:
        return [tool.model_dump() for tool in self.list_tools()]

    async def _tools_changed(self) -> None:
        for client in list(self.clients):
            try:
                await client.send_tool_list_changed()
            except Exception as error:  # a client gone meanwhile: the others are told all the same
                _log.debug("tools/list_changed not sent: %s", error)

    def running(self) -> int:
        """Guests running now (a call answered at shutdown may leave its guest running until its deadline)."""
        return self._guests

    def cancel_all(self, reason: str) -> None:
        for scope in list(self._calls):
            scope.cancel(reason)

    async def drain(self, grace_s: float) -> None:
        """From the start of a shutdown, on the event loop: new calls are refused; calls in flight go on until
        `SHUTDOWN_CANCEL_MARGIN_S` before the grace ends, then their generations are cancelled (a guest then answers
        at once), and half the margin later the calls still running are answered without their guests."""
        self.stopping = SHUTTING_DOWN
        await self._settled(max(0.0, grace_s - SHUTDOWN_CANCEL_MARGIN_S))
        if self._calls:
            self.cancel_all(SHUTTING_DOWN)
            await self._settled(SHUTDOWN_CANCEL_MARGIN_S / 2)
            for waiting in list(self._calls.values()):
                waiting.cancel()
            await self._settled(SHUTDOWN_CANCEL_MARGIN_S / 4)

    async def _settled(self, within_s: float) -> None:
        with anyio.move_on_after(within_s):
            while self._calls:
                await anyio.sleep(CANCEL_WAIT_S)

    def list_tools(self) -> list[Any]:
        import mcp_types as types

        tools = []
        for spec in self.specs.values():
            ok, _ = answer_type(spec.function.result)
            tools.append(
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=object_schema(spec.function.params),
                    output_schema=output_schema(ok),
                )
            )
        return tools

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        report: Callable[[float, str], Awaitable[None]] | None = None,
        gone: anyio.Event | None = None,
        body_bytes: int = 0,
        carrier: Sequence[tuple[str, str]] = (),
    ) -> ToolAnswer:
        """Call tool `name`. `report`: told the tokens generated so far while the call runs; `gone`: set when
        the client has gone (over HTTP), which cancels the call; `body_bytes`: the size of the request that
        carried it, checked against its component's `max-body-bytes`; `carrier`: the caller's trace context
        (`traceparent`, `tracestate`), which the call's span continues."""
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            return ToolAnswer(f"unknown tool {clip(repr(name), 100)} (tools: {known})", is_error=True, status=404)
        component = self.components[spec.component]
        limits = component.settings.limits
        request_id = f"call-{next(self._ids)}"
        self.stats.calls += 1
        arrived = time.monotonic()
        if self.stopping is not None:
            refused = ToolAnswer(self.stopping, is_error=True, status=503, protocol_error=True)
            return self._answered(component.name, f"{request_id} {name}", refused, arrived)
        if body_bytes > limits.max_body_bytes:
            key = component.settings.limit_key("max_body_bytes")
            reason = f"the request body is over the limit of {limits.max_body_bytes} bytes ({key})"
            refused = ToolAnswer(reason, is_error=True, status=413)
            return self._answered(component.name, f"{request_id} {name}", refused, arrived)
        scope = RunScope(
            f"tool call {name}", TokenBudget(limits.max_tokens, component.settings.limit_key("max_tokens"))
        )
        scope.set_deadline(arrived + limits.deadline_s)  # host calls that wait (outbound HTTP) never outlive it
        started, finished = threading.Event(), threading.Event()

        def work() -> ToolAnswer:
            started.set()
            with self._guests_lock:
                self._guests += 1
            try:
                return telemetry.call(
                    f"tools/call {name}",
                    {"mcp.method.name": "tools/call", "gen_ai.tool.name": name, "llmhost.request_id": request_id},
                    component.call,
                    spec.function,
                    arguments,
                    scope,
                    request_id,
                    self.settings.max_log_bytes,
                    lambda: self.observer.failure(component.name, LOG_DROPPED),
                    server=True,
                    carrier=carrier,
                )
            finally:
                with self._guests_lock:
                    self._guests -= 1
                finished.set()

        waiting = self._calls[scope] = anyio.CancelScope()
        answer: ToolAnswer | None = None
        try:
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(self._deadline, scope, spec, limits.deadline_s)
                if report is not None:
                    watchers.start_soon(self._progress, scope, report)
                if gone is not None:
                    watchers.start_soon(self._client_gone, scope, gone)
                try:
                    with waiting:
                        answer = await anyio.to_thread.run_sync(work, limiter=self._limiter, abandon_on_cancel=True)
                finally:
                    watchers.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # The client cancelled (or the server stops): the guest's generations end before their next decode
            # step; the guest then returns (or traps) on its thread, which closes the instance.
            scope.cancel(CANCELLED)
            self.stats.cancelled += 1
            with anyio.CancelScope(shield=True):  # (a call still waiting for a thread never starts)
                while self.stopping is None and started.is_set():
                    if await anyio.to_thread.run_sync(finished.wait, CANCEL_WAIT_S):
                        break
            _log.info("%s %s: cancelled by the client after %d tokens", request_id, name, scope.tokens)
            self.observer.request(component.name, CLIENT_CLOSED_STATUS, time.monotonic() - arrived)
            raise
        finally:
            del self._calls[scope]
        return self._answered(component.name, f"{request_id} {name}", self._outcome(scope, answer), arrived)

    @staticmethod
    def _outcome(scope: RunScope, answer: ToolAnswer | None) -> ToolAnswer:
        """The answer, told apart from why the call was stopped, if it was."""
        reason = scope.cancelled
        if reason == CLIENT_GONE_REASON:  # nobody reads it: the log and the metrics do
            text = f"cancelled: {reason} after {scope.tokens} tokens"
            return ToolAnswer(text, is_error=True, status=CLIENT_CLOSED_STATUS)
        if answer is None or (reason == SHUTTING_DOWN and answer.is_error):
            # Answered without its guest (abandoned at shutdown), or its guest failed because its generations were
            # cancelled: a JSON-RPC error says why, rather than the guest's account of it.
            return ToolAnswer(SHUTTING_DOWN, is_error=True, status=503, protocol_error=True)
        return answer

    def _answered(self, component: str, call: str, answer: ToolAnswer, arrived: float) -> ToolAnswer:
        """Count and log a call's answer."""
        self.observer.request(component, answer.status, time.monotonic() - arrived)
        if answer.failure is not None:
            self.observer.failure(component, answer.failure)
        if answer.status == CLIENT_CLOSED_STATUS:
            self.stats.cancelled += 1
        elif answer.is_error:
            self.stats.errors += 1
        if answer.is_error:
            _log.info("%s: %s", call, clip(answer.text))
        return answer

    async def _deadline(self, scope: RunScope, spec: ToolSpec, deadline_s: float) -> None:
        """At the deadline the guest's generations end with an error naming it (the instance itself is interrupted
        by its store's deadline)."""
        await anyio.sleep(deadline_s)
        key = self.components[spec.component].settings.limit_key("deadline_s")
        scope.cancel(f"the tool call ran past its deadline of {deadline_s} s ({key})")

    @staticmethod
    async def _client_gone(scope: RunScope, gone: anyio.Event) -> None:
        """The client went away (its connection closed): the call's generations stop before their next step,
        and their slots are free for others."""
        await gone.wait()
        scope.cancel(CLIENT_GONE_REASON)

    async def _progress(self, scope: RunScope, report: Callable[[float, str], Awaitable[None]]) -> None:
        reported = 0
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            tokens = scope.tokens
            if tokens > reported:
                reported = tokens
                try:
                    await report(tokens, f"{tokens} tokens generated")
                except Exception:  # the stream is gone: the call goes on (or is being stopped) without progress
                    _log.debug("progress not sent", exc_info=True)
                    return


def _connection(session: Any) -> Any:
    """The client's connection behind a request's session: the SDK makes a session per request, and a notification
    that concerns no request (the tools changed) goes out on the connection's own channel."""
    return getattr(session, "_connection", session)


def trace_carrier(meta: Any, headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The caller's trace context for a tool call: `traceparent`/`tracestate` from the request's `_meta` (where
    OpenTelemetry's MCP conventions put them, and the only place over stdio), else from the HTTP request's
    headers."""
    fields = [(key, value) for key, value in dict(meta).items() if key in TRACE_FIELDS and isinstance(value, str)]
    if fields:
        return fields
    decoded = [(key.decode("latin-1").lower(), value.decode("latin-1")) for key, value in headers]
    return [(key, value) for key, value in decoded if key in TRACE_FIELDS]


def mcp_server(tools: ToolServer, watching: bool = False) -> Any:
    """The `mcp` SDK's low-level server, answering tools/list and tools/call from `tools`. `watching`: the tools may
    change (`--watch`): the server declares `tools.listChanged` and tells each client when they do."""
    import mcp_types as types
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.shared.exceptions import MCPError

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        tools.clients.add(_connection(ctx.session))
        return types.ListToolsResult(tools=tools.list_tools())

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        tools.clients.add(_connection(ctx.session))
        report = None
        meta = params.meta or {}
        if meta.get("progress_token", meta.get("progressToken")) is not None:  # else progress is not wanted

            async def report(progress: float, message: str) -> None:
                await ctx.session.report_progress(progress, None, message)

        # Over HTTP, what the front knows of the request that carried the call (`shell.front.Guarded`).
        http = getattr(getattr(ctx, "request", None), "scope", None) or {}
        carrier = trace_carrier(meta, http.get("headers", ()))
        answer = await tools.call(
            params.name, params.arguments, report, http.get(CLIENT_GONE), http.get(BODY_BYTES, 0), carrier
        )
        if answer.protocol_error:
            raise MCPError(SERVER_ERROR, answer.text)
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)],
            structured_content=answer.structured,
            is_error=answer.is_error,
        )

    from importlib.metadata import version

    server = Server(SERVER_NAME, version=version("llmhost"), on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    if watching:
        # Every transport asks the server for its initialization options (Streamable HTTP's session manager with no
        # arguments), so the capability is set on the server itself.
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        server.create_initialization_options = lambda *args, **kwargs: options  # type: ignore[method-assign]
    return server
