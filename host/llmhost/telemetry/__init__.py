"""OpenTelemetry traces of `llmhost serve` and `llmhost mcp`: off by default, and free when off.

Tracing is on when an OTLP/HTTP endpoint is configured (`[telemetry] otlp-endpoint`, else the standard
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`); `tracing(config)` turns it on for a server's
lifetime. Until then no `opentelemetry` module is imported: every function here checks one module global and hands
back its argument, or a shared no-op, so a call site is one line whatever the state, and nothing runs per token.

Spans (their names and attributes: docs/serve.md): the request (server span, continuing an incoming W3C
`traceparent`), the component call, each host call (`llm.*`, `sequences.*`, `keyvalue.*`, `outbound-http.*`), a
stream for its lifetime, and the model's work (`llm.queue`, `llm.prefill`, `llm.decode`, from the generation's own
timestamps). Guests run on worker threads: `carry` runs a function in a copy of the caller's context, so the spans
made there are children of the request's. Attributes follow OpenTelemetry's GenAI conventions; prompts and
completions are recorded only with `capture-content = true`, headers and config values never.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from llmhost.telemetry.span import NOOP_SPAN, ModelWork, Span, Tracer

if TYPE_CHECKING:
    from llmhost.config import TelemetryConfig
    from llmhost.domain.types import Usage

T = TypeVar("T")
_log = logging.getLogger(__name__)

# The tracer while tracing is on (None: off). Set by `tracing` only.
_tracer: Tracer | None = None

TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for traces, below the base endpoint
_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_NOOP_CONTEXT = contextlib.nullcontext(NOOP_SPAN)


def endpoint_of(config: TelemetryConfig) -> str | None:
    """Where spans go (the full traces URL), or None when tracing is off (nothing configured, or
    `OTEL_SDK_DISABLED=true`)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if config.otlp_endpoint is not None:
        return config.otlp_endpoint.rstrip("/") + TRACES_PATH
    traces, base = (os.environ.get(name, "").strip() for name in _ENV_ENDPOINTS)
    if traces:
        return traces
    return base.rstrip("/") + TRACES_PATH if base else None


@contextlib.contextmanager
def tracing(config: TelemetryConfig) -> Iterator[bool]:
    """Trace while inside (yields whether tracing is on); on leaving, the spans not yet sent are flushed."""
    global _tracer
    endpoint = endpoint_of(config)
    if endpoint is None or _tracer is not None:  # off, or on already (a server inside another's process)
        yield _tracer is not None
        return
    try:
        from llmhost.telemetry.otel import OtelTracer  # the SDK is imported only now
    except ImportError as error:
        from llmhost.config import ConfigError

        raise ConfigError(
            f"tracing is on (spans to {endpoint}), but OpenTelemetry is not installed ({error.name}): "
            "pip install llmhost[otel], or unset `[telemetry] otlp-endpoint` / OTEL_EXPORTER_OTLP_ENDPOINT"
        ) from None

    tracer = OtelTracer(endpoint, capture_content=config.capture_content)
    _tracer = tracer
    try:
        yield True
    finally:
        _tracer = None
        tracer.shutdown()


def enabled() -> bool:
    return _tracer is not None


def span(name: str, attributes: dict[str, Any] | None = None) -> contextlib.AbstractContextManager[Span]:
    """A span, current while inside (a child of the current one)."""
    return _NOOP_CONTEXT if _tracer is None else _tracer.span(name, attributes)


def server_span(
    method: str, path: str, headers: Sequence[tuple[str, str]], attributes: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[Span]:
    """An incoming request's span: the child of the caller's `traceparent` when it sent a valid one."""
    return _NOOP_CONTEXT if _tracer is None else _tracer.server_span(method, path, headers, attributes)


def call(
    name: str,
    attributes: dict[str, Any],
    function: Callable[..., T],
    *args: Any,
    server: bool = False,
    carrier: Sequence[tuple[str, str]] = (),
) -> T:
    """`function(*args)` inside a span (a guest's export: the component span; `server`: a request's own span, as
    an MCP tool call's, continuing the trace of a `traceparent` in `carrier`: (name, value) pairs)."""
    if _tracer is None:
        return function(*args)
    with _tracer.span(name, attributes, server, carrier):
        return function(*args)


def carry(function: Callable[..., T]) -> Callable[..., T]:
    """`function`, to run on another thread in a copy of this one's context (its spans the current span's
    children). Off: `function` itself."""
    if _tracer is None:
        return function
    return functools.partial(contextvars.copy_context().run, function)


def capture() -> object | None:
    """The current context, for work finished on another thread (`model_work`); None when off."""
    return None if _tracer is None else _tracer.capture()


def host_call(interface: str, name: str, function: Callable[..., T]) -> Callable[..., T]:
    """A host function's domain function, wrapped in a span `INTERFACE.NAME` when tracing is on. A stream's
    `next` (one call per token) and a stream's opening (its span is `stream`'s) are left as they are."""
    if _tracer is None or name.endswith((".next", "-stream")):
        return function
    return _tracer.host_call(interface, name, function)


def stream(name: str, model: str, params: Any, open_stream: Callable[[], T]) -> T:
    """`open_stream()`, a generation; traced, its span `llm.NAME` (`llm.chat-stream`) lasts until the stream ends,
    with its usage. `name`: the WIT function; `params`: its WIT params (max-tokens is read from them)."""
    if _tracer is None:
        return open_stream()
    return _tracer.stream(name, model, params, open_stream)


def model_work(
    parent: object,
    model: str,
    times: tuple[float, float, float, float],
    usage: Usage,
    finish_reason: str | None,
    reused_tokens: int = 0,
) -> None:
    """A generation's queue wait, prefill and decode, as spans under `parent` (from `capture`), from its
    `time.monotonic()` marks (submitted, admitted, first token, ended; 0: not reached)."""
    if _tracer is not None:
        try:  # called under the model's lock by its scheduler: must never raise
            _tracer.model_work(parent, ModelWork(model, times, usage, finish_reason, reused_tokens))
        except Exception:
            _log.debug("recording a generation's spans failed", exc_info=True)


def inject(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An outbound request's headers, with the current span's `traceparent` (and `tracestate`) in place of any
    the guest set. Off: `headers` as they are."""
    return headers if _tracer is None else _tracer.inject(headers)


__all__ = [
    "NOOP_SPAN",
    "Span",
    "call",
    "capture",
    "carry",
    "enabled",
    "endpoint_of",
    "host_call",
    "inject",
    "model_work",
    "server_span",
    "span",
    "stream",
    "tracing",
]
