"""`llmhost serve`: guest components of the `http-app` world (wit/http.wit) as sandboxed HTTP apps.

Layout: `config` (app config, TOML, validation), `component` (one component: instantiate per request, call
`handle`, in the request's run scope), `app` (the ASGI app: routing, limits, streaming, disconnects, deadlines, the
request log), `protocol` (request-head timeout), `server` (uvicorn, signals, graceful shutdown), `policy`
(defaults and limits), `sources` (guest directories built as components), `watch` (`--watch`: rebuild and swap).
A request is a run scope (runtime/scope.py) with a token budget, cancelled by its deadline, its client's disconnect
or the server's shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmhost.shell.config import AppConfig, ServeSettings, load_app_config, settings_for

__all__ = ["AppConfig", "ServeSettings", "load_app_config", "run", "settings_for"]


def run(settings: ServeSettings, log_level: str = "info", watch: bool = False, preload: Sequence[str] = ()) -> int:
    """Serve until SIGINT/SIGTERM (imports uvicorn and wasmtime only when called); `preload`: models loaded first."""
    from llmhost.serve.server import run as run_server

    return run_server(settings, log_level, watch, preload)
