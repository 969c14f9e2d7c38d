"""A tiny OTLP/HTTP trace receiver on loopback for tests and benchmarks: accepts `POST /v1/traces` (protobuf, as the
official exporter sends it), decodes it with OpenTelemetry's own protobuf classes, and keeps every span.

Spans are kept as `Received`: hex ids, the parent's hex id ("" for a root), the kind's name, and the attributes as
plain Python values.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str  # "SERVER", "INTERNAL", ...
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    service: str


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, which) if which is not None else None


class Receiver:
    """The spans received so far (`spans`), and the POSTs (`posts`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.spans: list[Received] = []
        self.posts = 0
        self._changed = threading.Condition()

    @property
    def endpoint(self) -> str:
        """The base URL (OTEL_EXPORTER_OTLP_ENDPOINT, `[telemetry] otlp-endpoint`)."""
        return f"http://127.0.0.1:{self.port}"

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Received(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=ProtoSpan.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status=span.status.code,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        with self._changed:
            self.posts += 1
            self.spans.extend(found)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float) -> list[Received]:
        """The spans once `predicate(spans)` holds (AssertionError after `timeout` s)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({s.name for s in self.spans})
                    raise AssertionError(f"the spans did not arrive within {timeout} s; received: {names}")
                self._changed.wait(min(left, 0.2))
            return list(self.spans)

    def clear(self) -> None:
        with self._changed:
            self.spans.clear()
            self.posts = 0


def _handler(receiver_of: Callable[[], Receiver]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's names)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != TRACES_PATH:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            receiver_of().add(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    return Handler


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (a free port) for the block."""
    holder: list[Receiver] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(lambda: holder[0]))
    server.daemon_threads = True
    holder.append(Receiver(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
