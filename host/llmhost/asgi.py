"""An `http-app` component as an ASGI app of its own: mount it under a path in Starlette or FastAPI, or run it with
any ASGI server. It is `llmhost serve`'s app (serve/app.py) with one route, so it has serve's semantics: the
deadlines, a client's disconnect cancelling its guest's generations, the body limit, streaming, and the same error
statuses. Under a mount the guest sees the path below the mount point (the ASGI `root_path` is stripped).

    app = FastAPI()
    app.mount("/tools", component_app(host, "app.wasm", allowed_models=["gemma-3-270m"]))
    app.mount("/chat", component_app(host, "guest-examples/chat"))  # a guest directory, built (cached)
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from llmhost.api import Host, HostError
from llmhost.config import ConfigError, EnvValue, alias_map
from llmhost.domain.limits import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_LOG_BYTES
from llmhost.serve.app import Exchange, Receive, Scope, Send, ServeApp
from llmhost.serve.component import HttpComponent
from llmhost.shell.auth import ApiKeys
from llmhost.shell.config import ComponentConfig, Limits, component_settings
from llmhost.shell.metrics import RequestObserver

ORIGIN = "component_app()"  # where limits and grants came from, as error messages name it
# What a client leaves unencoded in a path besides letters, digits, `-._~` and `/` (RFC 3986 `pchar`): a mount point
# holding other characters (a space, non-ASCII) arrives percent-encoded as `quote` encodes it.
PATH_SAFE = "/!$&'()*+,;=:@"
_ABSOLUTE_FORM = re.compile(r"^https?://[^/]*", re.I)  # `GET http://host/path HTTP/1.1` (as serve.app.Exchange)


def mount_prefix(scope: Scope) -> str | None:
    """The raw path's prefix that is this app's mount point (the ASGI `root_path`, which a router such as Starlette's
    `Mount` matched on the percent-decoded path): the mount point as it is or as a client encodes it. "" when the raw
    path does not reach the mount point at all (no mount; a proxy that strips its prefix). None when it reaches it
    only through a needless or ambiguous encoding (`/%74ools/x`, `/tools%2fx` under `/tools`): serve routes raw paths
    and sends neither to `/tools`, so the mount refuses them with 404 too, and the guest never sees such a path."""
    root: str = scope.get("root_path", "")
    raw_bytes = scope.get("raw_path")
    if not root or not raw_bytes:
        return ""
    raw = raw_bytes.decode("latin-1")
    absolute = _ABSOLUTE_FORM.match(raw)
    if absolute:
        raw = raw[absolute.end() :] or "/"
    for prefix in dict.fromkeys((root, quote(root, safe=PATH_SAFE))):
        if raw.startswith(prefix) and raw[len(prefix) : len(prefix) + 1] in ("", "/"):
            return prefix
    decoded = unquote(raw)  # what the server decoded the routed path from
    base = root.rstrip("/")
    return None if decoded == base or decoded.startswith(base + "/") else ""


class _Refused(Exchange):
    """A request that reached the mount through an encoded prefix: 404, as serve answers it (logged and counted as
    every request)."""

    async def _serve(self) -> None:
        await self.respond(404, f"no route for {self.path}")


class ComponentApp(ServeApp):
    """One component served on every path of its mount; `close()` (or the ASGI lifespan's shutdown) cancels what
    runs and stops its worker pool."""

    def __init__(self, component: HttpComponent, max_concurrency: int, **options: Any) -> None:
        executor = concurrent.futures.ThreadPoolExecutor(
            max_concurrency, thread_name_prefix=f"llmhost-{component.name}"
        )
        super().__init__({component.name: component}, {"/": component.name}, executor, **options)
        self.name = component.name
        self.max_concurrency = max_concurrency

    @property
    def component(self) -> HttpComponent:
        """The component serving now (a `swap` replaces it; the replaced one is not kept)."""
        return self.components[self.name]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # run on its own by an ASGI server (a mount gets no lifespan)
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "http":
            prefix = mount_prefix(scope)
            if prefix is None:
                await _Refused(self, scope, receive, send).run()
                return
            if prefix:  # stripped from the raw path as the guest sees it (`Exchange`): the mount point as it came
                scope = {**scope, "root_path": prefix}
        await super().__call__(scope, receive, send)

    def close(self) -> None:
        self.cancel_all("the app is shutting down")
        self._executor.shutdown(wait=False, cancel_futures=True)


def component_app(
    host: Host,
    source: str | Path,
    *,
    name: str | None = None,
    allowed_models: Iterable[str] | None = None,
    key_value_stores: Iterable[str] = (),
    config: Mapping[str, str | EnvValue] | None = None,
    allowed_outbound_hosts: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    limits: Limits | Mapping[str, Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    api_keys: Iterable[str] = (),
    metrics: RequestObserver | None = None,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
) -> ComponentApp:
    """Load (compiling on first use) an `http-app` component and serve it as an ASGI app. `source`: a .wasm, or a
    guest directory (app.py or app.js), built as `llmhost serve DIR` builds it, through the toolchain's
    content-keyed cache (a `BuildError` names the file and line of what fails); `name` defaults to the file's stem
    or the directory's name.

    Grants (`allowed_models`, `key_value_stores`, `config`, `allowed_outbound_hosts`, `env`) are those of
    `[components.NAME]` in serve's config, nothing beyond the model by default; `limits` those of `[limits]`
    (`deadline_s`, `max_duration_s`, `max_memory_mb`, `max_body_bytes`, `max_tokens`; serve's defaults otherwise).
    At most `max_concurrency` guests run at once, each on a thread of the app's own pool (more requests wait for
    one, within their deadline). `api_keys`: requests must carry `Authorization: Bearer KEY` with one of them (none:
    open). `metrics`: where requests and guest failures are counted (`shell.metrics.ServeMetrics`, whose `registry`
    is a Prometheus registry). Errors in these are `HostError`s naming the parameter.
    """
    given = Path(source)
    component_name = name or (given.resolve().name if given.is_dir() else given.stem) or "app"
    path = host._component_of(given, "http-app")  # a guest directory: built (cached), as serve builds DIR
    try:
        resolved_limits = limits if isinstance(limits, Limits) else Limits(**dict(limits or {}))
        component = ComponentConfig(
            source=path,
            allowed_models=list(allowed_models) if allowed_models is not None else None,
            key_value_stores=tuple(key_value_stores),
            config=dict(config or {}),
            allowed_outbound_hosts=tuple(allowed_outbound_hosts),
            env=dict(env or {}),
        )
        settings = component_settings(component_name, component, resolved_limits, ORIGIN, alias_map(host.config.models))
    except (ValueError, ConfigError) as error:
        raise HostError(f"{ORIGIN}: {error}") from None
    if max_concurrency < 1:
        raise HostError(f"{ORIGIN}: max_concurrency must be at least 1, got {max_concurrency}")
    return ComponentApp(
        HttpComponent(host, settings),
        max_concurrency,
        body_timeout_s=body_timeout_s,
        max_log_bytes=max_log_bytes,
        api_keys=ApiKeys(api_keys),
        observer=metrics,
    )
