"""`llmhost mcp`: components' exported functions as MCP tools, over stdio or Streamable HTTP (the official `mcp`
SDK speaks the protocol).

Each call runs on a worker thread (at most `max-concurrency` at once) in a fresh instance, with serve's limits: the
component's deadline, its token budget and memory, its `allowed-models`. Generations of concurrent calls batch on
the model like any other callers'. A `notifications/cancelled` cancels the call's run scope, which stops its
generations before their next decode step; a call that carries a `progressToken` is told the tokens generated so
far while it runs. `tools/list` reads the descriptions made when the components were loaded.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from llmhost.api import Host
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.mcp.schema import answer_type, object_schema, output_schema
from llmhost.mcp.tools import ToolAnswer, ToolComponent, ToolSpec, tool_specs
from llmhost.run.scope import RunScope, TokenBudget
from llmhost.serve.app import CLIENT_CLOSED_STATUS
from llmhost.serve.component import LOG_DROPPED
from llmhost.serve.config import ServeSettings
from llmhost.serve.metrics import RequestObserver

_log = logging.getLogger("llmhost.mcp")

PROGRESS_INTERVAL_S = 0.1  # how often a call's progress (tokens generated) is looked at
SERVER_NAME = "llmhost"
CANCELLED = "the client cancelled the tool call"
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
    ) -> ToolAnswer:
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            return ToolAnswer(f"unknown tool {name!r} (tools: {known})", is_error=True, status=404)
        component = self.components[spec.component]
        limits = component.settings.limits
        scope = RunScope(
            f"tool call {name}", TokenBudget(limits.max_tokens, component.settings.limit_key("max_tokens"))
        )
        request_id = f"call-{next(self._ids)}"
        self.stats.calls += 1
        started, finished = threading.Event(), threading.Event()
        arrived = time.monotonic()

        def work() -> ToolAnswer:
            started.set()
            try:
                return component.call(
                    spec.function,
                    arguments,
                    scope,
                    request_id,
                    self.settings.max_log_bytes,
                    lambda: self.observer.failure(component.name, LOG_DROPPED),
                )
            finally:
                finished.set()

        try:
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(self._deadline, scope, spec, limits.deadline_s)
                if report is not None:
                    watchers.start_soon(self._progress, scope, report)
                try:
                    answer = await anyio.to_thread.run_sync(work, limiter=self._limiter, abandon_on_cancel=True)
                finally:
                    watchers.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # The client cancelled (or the server stops): the guest's generations end before their next decode
            # step; the guest then returns (or traps) on its thread, which closes the instance.
            scope.cancel(CANCELLED)
            self.stats.cancelled += 1
            with anyio.CancelScope(shield=True):  # (a call still waiting for a thread never starts)
                while started.is_set() and not await anyio.to_thread.run_sync(finished.wait, CANCEL_WAIT_S):
                    pass
            _log.info("%s %s: cancelled by the client after %d tokens", request_id, name, scope.tokens)
            self.observer.request(component.name, CLIENT_CLOSED_STATUS, time.monotonic() - arrived)
            raise
        self.observer.request(component.name, answer.status, time.monotonic() - arrived)
        if answer.failure is not None:
            self.observer.failure(component.name, answer.failure)
        if answer.is_error:
            self.stats.errors += 1
            _log.info("%s %s: %s", request_id, name, answer.text)
        return answer

    async def _deadline(self, scope: RunScope, spec: ToolSpec, deadline_s: float) -> None:
        """At the deadline the guest's generations end with an error naming it (the instance itself is interrupted
        by its store's deadline)."""
        await anyio.sleep(deadline_s)
        key = self.components[spec.component].settings.limit_key("deadline_s")
        scope.cancel(f"the tool call ran past its deadline of {deadline_s} s ({key})")

    async def _progress(self, scope: RunScope, report: Callable[[float, str], Awaitable[None]]) -> None:
        reported = 0
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            tokens = scope.tokens
            if tokens > reported:
                reported = tokens
                await report(tokens, f"{tokens} tokens generated")


def mcp_server(tools: ToolServer) -> Any:
    """The `mcp` SDK's low-level server, answering tools/list and tools/call from `tools`."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools.list_tools())

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        report = None
        meta = params.meta or {}
        if meta.get("progress_token", meta.get("progressToken")) is not None:  # else progress is not wanted

            async def report(progress: float, message: str) -> None:
                await ctx.session.report_progress(progress, None, message)

        answer = await tools.call(params.name, params.arguments, report)
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)],
            structured_content=answer.structured,
            is_error=answer.is_error,
        )

    from importlib.metadata import version

    return Server(SERVER_NAME, version=version("llmhost"), on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(tools: ToolServer) -> None:
    from mcp.server.stdio import stdio_server

    server = mcp_server(tools)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(tools: ToolServer) -> Any:
    """The Streamable HTTP app (at `/mcp`), behind serve's API keys when some are configured."""
    server = mcp_server(tools)
    host, _ = tools.settings.listen
    app = server.streamable_http_app(host=host)
    keys = tools.settings.api_keys
    if not keys:
        return app

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
            if not keys.allows(headers):
                body = b'{"error": {"message": "missing or wrong API key (Authorization: Bearer KEY)"}}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def warm_models(settings: ServeSettings) -> list[str]:
    """The local models loaded before serving: those the components' `allowed-models` name, else the default one
    (loading every configured model would slow each stdio start, which a client does per session)."""
    allowed: set[str] = set()
    for component in settings.components.values():
        allowed.update(component.allowed_models or {DEFAULT_MODEL})
    models = settings.host.models
    return [m for m in models if m in allowed and models[m].backend == "llama-cpp"]


def run(settings: ServeSettings, stdio: bool, log_level: str = "info") -> int:
    """Serve the components' tools over stdio (until the client closes it) or Streamable HTTP at
    `http://LISTEN/mcp` (until SIGINT/SIGTERM); returns the exit status. Logs go to stderr: on stdio, stdout is
    the protocol's."""
    from llmhost.serve.probes import Readiness
    from llmhost.serve.server import bind, configure_logging, observed_host, url_host

    configure_logging(log_level)
    readiness = Readiness()
    with observed_host(settings, readiness) as (host, _, metrics):
        tools = ToolServer(host, settings, metrics)
        for model in warm_models(settings):  # the first call then waits for no model load
            host.model_info(model)
        _log.info("%d tools: %s", len(tools.specs), ", ".join(tools.specs) or "none")
        readiness.ready = True
        if stdio:
            anyio.run(serve_stdio, tools)
        else:
            import uvicorn

            sock = bind(*settings.listen)
            shown_host, port = sock.getsockname()[:2]
            server = uvicorn.Server(uvicorn.Config(http_app(tools), log_level=log_level, lifespan="on"))
            _log.info("listening on http://%s:%d/mcp (MCP Streamable HTTP)", url_host(shown_host), port)
            server.run(sockets=[sock])
        readiness.ready = False
        stats = tools.stats
        _log.info("served %d tool calls (%d errors, %d cancelled)", stats.calls, stats.errors, stats.cancelled)
    return 0
