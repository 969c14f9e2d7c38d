"""`llmhost mcp`: components' exported functions as MCP tools, over stdio or Streamable HTTP (the official `mcp`
SDK speaks the protocol). `calls` runs the tool calls (limits, cancellation, progress, shutdown), `http` serves
them behind serve's HTTP front, `stdio` over stdin and stdout; `tools` and `schema` describe them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import anyio

from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.mcp.calls import ToolServer, mcp_server
from llmhost.shell.config import ServeSettings

_log = logging.getLogger("llmhost.mcp")


def warm_models(settings: ServeSettings) -> list[str]:
    """The local models loaded before serving: those the components' `allowed-models` name, else the default one
    (loading every configured model would slow each stdio start, which a client does per session)."""
    allowed: set[str] = set()
    for component in settings.components.values():
        allowed.update(component.allowed_models or {DEFAULT_MODEL})
    models = settings.host.models
    return [m for m in models if m in allowed and models[m].backend == "llama-cpp"]


def run(settings: ServeSettings, stdio: bool, log_level: str = "info", watch: bool = False) -> int:
    """Serve the components' tools over stdio (until the client closes it) or Streamable HTTP at
    `http://LISTEN/mcp` (until SIGINT/SIGTERM, then drained as serve is); returns the exit status. Logs go to
    stderr: on stdio, stdout is the protocol's. `watch`: rebuild a component when its guest directory changes."""
    from llmhost.mcp.tools import ToolComponent
    from llmhost.shell.hosting import configure_logging, observed_host, watcher_for
    from llmhost.shell.probes import Readiness

    configure_logging(log_level)
    readiness = Readiness()
    with observed_host(settings, readiness) as (host, _, metrics):
        tools = ToolServer(host, settings, metrics)
        for model in warm_models(settings):  # the first call then waits for no model load
            host.model_info(model)
        _log.info("%d tools: %s", len(tools.specs), ", ".join(tools.specs) or "none")
        watcher = None
        if watch:
            load = lambda name, path: ToolComponent(host, replace(settings.components[name], source=path))  # noqa: E731
            watcher = watcher_for(settings, None, load, tools.swap)
        if stdio:
            from llmhost.mcp.stdio import serve_stdio

            readiness.ready = True
            anyio.run(serve_stdio, mcp_server(tools, watching=watch), watcher)
        else:
            from llmhost.mcp.http import serve_http

            serve_http(tools, readiness, watcher)
        readiness.ready = False
        stats = tools.stats
        _log.info("served %d tool calls (%d errors, %d cancelled)", stats.calls, stats.errors, stats.cancelled)
        stuck = tools.running()
        if stuck:
            # A guest computing without calling the host cannot be stopped before its own deadline; the process
            # does not wait for it past the grace (its call was answered).
            _log.warning("stopped with %d guest(s) still running; they are abandoned", stuck)
            logging.shutdown()
            os._exit(0)
    return 0
