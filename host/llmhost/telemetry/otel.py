"""The tracer while tracing is on: OpenTelemetry's SDK, exporting over OTLP/HTTP (protobuf) in batches.

Imported only by `telemetry.tracing` when an endpoint is configured (the `otel` extra: `pip install llmhost[otel]`).
The provider is this host's own, never the process's global one (Ray and others may set theirs); the context is
OpenTelemetry's (contextvars), so `telemetry.carry` takes it to the guest's thread. A failed call's status says the
exception's type, never its message (a message may quote a guest's config value before it is scrubbed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmhost.domain.types import StreamDone
from llmhost.telemetry import genai
from llmhost.telemetry.span import TRACE_FIELDS, Attributes, Headers, ModelWork, Span

T = TypeVar("T")

_log = logging.getLogger(__name__)
SERVICE_NAME = "llmhost"  # unless OTEL_SERVICE_NAME says otherwise
_TRACE_HEADER_BYTES = tuple(name.encode() for name in TRACE_FIELDS)


class OtelSpan(Span):
    __slots__ = ("raw",)

    def __init__(self, raw: trace.Span) -> None:
        self.raw = raw

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self.raw.set_attribute(key, value)

    def fail(self, message: str) -> None:
        self.raw.set_status(Status(StatusCode.ERROR, message))


def _safely(attributes: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Attributes read from a guest's values: none rather than a failed host call, should a value surprise."""
    try:
        return attributes()
    except Exception:
        _log.debug("reading a span's attributes failed", exc_info=True)
        return {}


def _failed(raw: trace.Span, error: BaseException) -> None:
    raw.set_status(Status(StatusCode.ERROR, type(error).__name__))


class OtelTracer:
    def __init__(self, endpoint: str, *, capture_content: bool) -> None:
        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self._tracer = self._provider.get_tracer("llmhost")
        self._propagator = TraceContextTextMapPropagator()
        self.capture_content = capture_content

    def shutdown(self) -> None:
        self._provider.shutdown()  # sends what the batch still holds

    @contextlib.contextmanager
    def span(self, name: str, attributes: Attributes, server: bool = False, carrier: Headers = ()) -> Iterator[Span]:
        kind = SpanKind.SERVER if server else SpanKind.INTERNAL
        with self._tracer.start_as_current_span(
            name, self._parent(carrier), kind, attributes, record_exception=False, set_status_on_exception=False
        ) as raw:
            try:
                yield OtelSpan(raw)
            except BaseException as error:
                _failed(raw, error)
                raise

    def _parent(self, carrier: Headers) -> otel_context.Context | None:
        """The caller's context from its `traceparent` (and `tracestate`); None (the current one): none sent, and
        an invalid one starts a new trace."""
        fields = {name.lower(): value for name, value in carrier if name.lower() in TRACE_FIELDS}
        return self._propagator.extract(fields) if fields else None

    def server_span(
        self, method: str, path: str, headers: Headers, attributes: Attributes
    ) -> contextlib.AbstractContextManager[Span]:
        fields = {"http.request.method": method, "url.path": path.split("?", 1)[0], **(attributes or {})}
        return self.span(method, fields, True, headers)

    def capture(self) -> object:
        return otel_context.get_current()

    def host_call(self, interface: str, name: str, function: Callable[..., T]) -> Callable[..., T]:
        span_name, capture = genai.span_name(interface, name), self.capture_content
        llm = interface == "llm"

        def traced(store: Any, *args: Any) -> T:
            attributes = _safely(lambda: genai.request_attributes(name, args, capture)) if llm else None
            with self._tracer.start_as_current_span(
                span_name, attributes=attributes, record_exception=False, set_status_on_exception=False
            ) as raw:
                try:
                    result = function(store, *args)
                except BaseException as error:
                    _failed(raw, error)
                    raise
                if llm:
                    raw.set_attributes(_safely(lambda: genai.result_attributes(result, capture)))
                return result

        return traced

    def stream(self, name: str, model: str, params: Any, open_stream: Callable[[], T]) -> T:
        operation = genai.OPERATIONS.get(genai.short_name(name).removesuffix("-stream"))
        attributes = {
            genai.OPERATION: operation,
            genai.MODEL: model or None,
            genai.MAX_TOKENS: genai.max_tokens_of(params),
        }
        raw = self._tracer.start_span(
            f"llm.{genai.short_name(name)}", attributes={k: v for k, v in attributes.items() if v is not None}
        )
        context = trace.set_span_in_context(raw)
        token = otel_context.attach(context)
        try:
            generation = open_stream()
        except BaseException as error:
            _failed(raw, error)
            raw.end()
            raise
        finally:
            otel_context.detach(token)
        return TracedStream(generation, raw, context, self.capture_content)  # type: ignore[return-value]

    def model_work(self, parent: object, work: ModelWork) -> None:
        context = parent if isinstance(parent, otel_context.Context) else None  # from `capture`
        submitted, admitted, first, ended = work.times
        offset = time.time_ns() - time.monotonic_ns()  # monotonic marks -> epoch nanoseconds

        def add(name: str, start: float, end: float, attributes: dict[str, Any]) -> None:
            raw = self._tracer.start_span(
                name, context, attributes={genai.MODEL: work.model, **attributes}, start_time=offset + int(start * 1e9)
            )
            raw.end(end_time=offset + int(max(start, end) * 1e9))

        if submitted and admitted:
            add("llm.queue", submitted, admitted, {})
        elif submitted:  # never admitted (cancelled or refused while waiting)
            add("llm.queue", submitted, ended, {"llmhost.admitted": False})
        if admitted:
            prefill = {
                genai.INPUT_TOKENS: work.usage.prompt_token_count,
                "llmhost.reused_prompt_tokens": work.reused_tokens,
            }
            add("llm.prefill", admitted, first or ended, prefill)
        if first:
            decode: dict[str, Any] = {genai.OUTPUT_TOKENS: work.usage.generated_token_count}
            if work.finish_reason is not None:
                decode[genai.FINISH_REASONS] = (work.finish_reason,)
            add("llm.decode", first, ended, decode)

    def inject(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        if not carrier:
            return headers
        kept = [(name, value) for name, value in headers if name.lower() not in _TRACE_HEADER_BYTES]
        return kept + [(name.encode("ascii"), value.encode("ascii")) for name, value in carrier.items()]


class TracedStream:
    """A generation whose span lasts until it ends (its `StreamDone`, an error, or `close`). Its first step runs
    in the span's context: a generation that makes its engine work on the first step makes it under the span."""

    def __init__(self, generation: Any, raw: trace.Span, context: otel_context.Context, capture: bool) -> None:
        self._generation = generation
        self._raw = raw
        self._context: otel_context.Context | None = context
        self._texts: list[str] | None = [] if capture else None
        self._ended = False

    def __iter__(self) -> TracedStream:
        return self

    def __next__(self) -> Any:
        token = otel_context.attach(self._context) if self._context is not None else None
        self._context = None
        try:
            event = next(self._generation)
        except StopIteration:
            self._end()
            raise
        except BaseException as error:
            _failed(self._raw, error)
            self._end()
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
        if isinstance(event, StreamDone):
            self._done(event)
        elif self._texts is not None:
            self._texts.append(getattr(event, "text", ""))
        return event

    def close(self) -> None:
        try:
            self._generation.close()
        finally:
            if not self._ended:
                self._raw.set_attribute("llmhost.cancelled", True)
            self._end()

    def _done(self, event: StreamDone) -> None:
        attributes = genai.result_attributes(event, capture_content=False)
        if self._texts is not None:
            attributes[genai.OUTPUT_MESSAGES] = genai.clip(
                json.dumps([{"role": "assistant", "content": "".join(self._texts)}])
            )
        self._raw.set_attributes(attributes)
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._raw.end()
