"""The ASGI application: route a request, enforce its limits, run its guest on a worker thread, stream the reply.

The event loop never runs guest code: each request's guest runs on a thread of a bounded pool (wasm and
llama.cpp release the GIL, so guests run in parallel). A guest streams through its `response-writer`; each
`start`/`write` hands its bytes to the loop and waits until the connection took them, so a slow client slows
its guest down instead of filling memory. A concurrent task watches for the client going away and cancels the
request's generations; a deadline timer does the same when the request runs out of time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

from llmhost import telemetry
from llmhost.api import HostError
from llmhost.domain.limits import DEADLINE_GRACE_S, DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_LOG_BYTES, MAX_REASON_CHARS
from llmhost.domain.types import encodable
from llmhost.interfaces.http import HttpFields, WriteClosed, WriteInvalid
from llmhost.run.scope import RunScope, TokenBudget
from llmhost.serve.component import HttpComponent, HttpRequest, HttpResponse
from llmhost.serve.deadline import Deadline
from llmhost.shell.auth import ApiKeys, unauthorized_body
from llmhost.shell.config import ComponentSettings
from llmhost.shell.front import read_body
from llmhost.shell.guest import CLIENT_CLOSED_STATUS, DEADLINE, LOG_DROPPED, GuestFailure, escape_controls
from llmhost.shell.metrics import NO_COMPONENT, RequestObserver

_log = logging.getLogger("llmhost.serve")
_REQUEST_IDS = itertools.count(1)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The server frames the body itself (content-length or chunked); these guest headers would contradict it.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_CLIENT_GONE = "the client disconnected"
_SHUTDOWN = "the server is shutting down"
# Statuses whose responses have no body (RFC 9110 §6.4.1): no content-length, no bytes.
_NO_BODY = frozenset({204, 304})


def head_problem(status: int, headers: HttpFields) -> str | None:
    """Why HTTP cannot send this status and these headers (None: it can)."""
    if not 200 <= status <= 599:
        return f"status {status} is not a final HTTP status (200-599)"
    for name, value in headers:
        if not _TOKEN.match(name):
            return f"header name {name!r} is not a valid HTTP token"
        if any(c in value for c in "\r\n\0") or not value.isascii() and not encodable(value, "latin-1"):
            return f"the value of header {name!r} contains characters HTTP does not allow"
    return None


def _encode_headers(headers: HttpFields) -> list[tuple[bytes, bytes]]:
    return [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers if n.lower() not in FRAMING_HEADERS]


def overrun_reason(settings: ComponentSettings, deadline: Deadline) -> str:
    """Why a request was stopped: it stalled (idle deadline) or ran as long as any request may (the cap)."""
    limits = settings.limits
    if deadline.capped():
        return f"the request ran for its limit of {limits.max_duration_s} s ({settings.limit_key('max_duration_s')})"
    return (
        f"the request ran past its deadline of {limits.deadline_s} s without a response or progress "
        f"({settings.limit_key('deadline_s')})"
    )


class ServeApp:
    """Routes by longest matching path prefix to components; one `Exchange` per request."""

    def __init__(
        self,
        components: dict[str, HttpComponent],
        routes: dict[str, str],
        executor: concurrent.futures.Executor,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        api_keys: ApiKeys | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        self.api_keys = api_keys if api_keys is not None else ApiKeys()
        self.observer = observer if observer is not None else RequestObserver()  # metrics (no-op when off)
        self.components = components  # name -> the component serving it now (`swap` replaces one)
        self._routes = sorted(routes.items(), key=lambda item: len(item[0]), reverse=True)
        self._executor = executor
        self.body_timeout_s = body_timeout_s
        self.max_log_bytes = max_log_bytes
        self._live: set[RunScope] = set()

    def running(self) -> int:
        """Guests running now."""
        return len(self._live)

    def route(self, path: str) -> HttpComponent | None:
        """The component for `path`: the raw path, percent-encoding kept, exactly as the guest sees it (so
        `/%61dmin` is not routed to `/admin`, and the route and the guest never disagree)."""
        for prefix, name in self._routes:
            base = prefix.rstrip("/")
            if path in (prefix, base) or path.startswith(base + "/"):
                return self.components[name]
        return None

    def swap(self, name: str, component: HttpComponent) -> None:
        """Put `component` in service for `name` (on the event loop): requests routed from now on get it, those in
        flight finish on the one they had, which is closed when the last of them ends."""
        old = self.components[name]
        self.components[name] = component
        old.retire()

    def cancel_all(self, reason: str) -> None:
        for scope in list(self._live):
            scope.cancel(reason)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not offered
            return
        exchange = Exchange(self, scope, receive, send)
        with telemetry.server_span(exchange.method, exchange.path, exchange.headers) as span:
            await exchange.run()
            span.set("http.response.status_code", exchange.final_status)
            span.set("llmhost.component", exchange.component)
            span.set("llmhost.request_id", exchange.request_id)
            if exchange.final_status >= 500:
                span.fail(f"HTTP {exchange.final_status}")

    def _run_guest(
        self,
        component: HttpComponent,
        request: HttpRequest,
        writer: ThreadWriter,
        scope: RunScope,
        deadline: Deadline,
    ) -> HttpResponse | GuestFailure:
        """On a worker thread: the guest's response, or why there is none (never raises)."""
        remaining = deadline.left()
        if scope.cancelled is not None:  # the client left while the request waited for a thread
            return GuestFailure(CLIENT_CLOSED_STATUS, scope.cancelled)
        if remaining <= 0:
            key = component.settings.limit_key("deadline_s")
            return GuestFailure(504, f"the request waited for a free worker past its deadline ({key})", DEADLINE)
        self._live.add(scope)
        try:
            # The instance is interrupted only after the grace in which a guest told of its deadline ends its
            # response; each write moves this further (`interfaces.http`, see `deadline`).
            budget = remaining + DEADLINE_GRACE_S
            dropped = lambda: self.observer.failure(component.name, LOG_DROPPED)  # noqa: E731
            return component.handle(request, writer, budget, writer.request_id, self.max_log_bytes, scope, dropped)
        except GuestFailure as failure:
            return failure
        except HostError as error:
            return GuestFailure(500, str(error)[:MAX_REASON_CHARS])
        except Exception as error:  # a host bug: answer 500 and log it, the server goes on
            _log.exception("%s: internal error", component.name)
            return GuestFailure(500, f"internal host error: {type(error).__name__}")
        finally:
            self._live.discard(scope)


class Exchange:
    """One request and its response, on the event loop."""

    def __init__(self, app: ServeApp, scope: Scope, receive: Receive, send: Send) -> None:
        self._app = app
        self._receive = receive
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._arrived = time.monotonic()
        self.request_id = f"{next(_REQUEST_IDS):x}"  # in the request's log line and its guest's log lines
        self.method: str = scope["method"]
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        # An absolute-form target (`GET http://host/path HTTP/1.1`, RFC 9112 §3.2.2) means its path.
        absolute = re.match(r"^https?://[^/]*", raw_path, re.I)
        if absolute:
            raw_path = raw_path[absolute.end() :] or "/"
        # Mounted under a path (Starlette's Mount, `asgi.component_app`), the guest sees the path below the mount.
        root = scope.get("root_path", "")
        if root and raw_path.startswith(root) and raw_path[len(root) : len(root) + 1] in ("", "/"):
            raw_path = raw_path[len(root) :] or "/"
        self.path = raw_path
        query = scope.get("query_string", b"")
        self.path_with_query = raw_path + (f"?{query.decode('latin-1')}" if query else "")
        self.headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        self.status = 0  # what was sent (0: nothing yet)
        self.closed: str | None = None  # why the guest's writes are refused from now on
        self.note = ""
        self.overrun: str | None = None  # the deadline passed (the guest is ending its response within the grace)
        self._send_lock = asyncio.Lock()
        self._scope: RunScope | None = None
        self._held: HttpComponent | None = None  # the routed component, until its guest is started
        self.component = NO_COMPONENT  # the routed component's name (metrics)
        self.failure: str | None = None  # how its guest failed (`component.FAILURE_KINDS`), if it did
        self._counted = False

    async def run(self) -> None:
        try:
            await self._serve()
        finally:
            if self._held is not None:  # answered without running its guest (401, 408, 413, ...)
                self._held.leave()
            self._count()
            duration = time.monotonic() - self._arrived
            tokens = self._scope.tokens if self._scope is not None else 0
            status = self.final_status
            note = f" ({escape_controls(self.note)})" if self.note else ""  # a trap's reason is the guest's text
            _log.info(
                "[%s] %s %s %d %.3fs tokens=%d%s",
                self.request_id,
                self.method,
                self.path_with_query,
                status,
                duration,
                tokens,
                note,
            )

    async def _serve(self) -> None:
        names = [name for name, _ in self.headers]
        if "transfer-encoding" in names and "content-length" in names:
            # Request smuggling surface (RFC 9112 §6.3): framed two ways, the request is refused and the connection
            # closed, so nothing sent after it on this connection is ever read as another request.
            await self.respond(400, "a request with both Content-Length and Transfer-Encoding is refused", close=True)
            return
        component = self._app.route(self.path)
        if component is None:
            await self.respond(404, f"no route for {self.path}")
            return
        component.enter()  # with no await since routing: a `swap` cannot close it under this request
        self._held = component
        self.component = component.name
        if not self._app.api_keys.allows(self.headers):
            await self.respond_unauthorized()
            return
        limits = component.settings.limits
        try:
            body = await asyncio.wait_for(self._read_body(limits.max_body_bytes), self._app.body_timeout_s)
        except TimeoutError:
            await self.respond(408, f"the request body did not arrive within {self._app.body_timeout_s} s", close=True)
            return
        if body is None:
            if self.closed is None:
                key = component.settings.limit_key("max_body_bytes")
                await self.respond(413, f"the request body is over the limit of {limits.max_body_bytes} bytes ({key})")
            return
        budget = TokenBudget(limits.max_tokens, component.settings.limit_key("max_tokens"))
        scope = self._scope = RunScope(f"request to {component.name}", budget)
        deadline = Deadline(self._arrived, limits.deadline_s, limits.max_duration_s)
        scope.set_time_left(deadline.left)  # host calls that wait (outbound HTTP) never outlive the request
        request = HttpRequest(self.method, self.path_with_query, self.headers, body)
        writer = ThreadWriter(self, deadline)
        work = self._loop.run_in_executor(
            self._app._executor, telemetry.carry(self._app._run_guest), component, request, writer, scope, deadline
        )
        # The guest may run on past the response (abandoned at its deadline): the component is left when it ends.
        work.add_done_callback(lambda _: component.leave())
        self._held = None
        watcher = asyncio.create_task(self._watch_disconnect(scope))
        try:
            outcome = await self._outcome(work, scope, deadline, component)
            await self._finish(outcome)
        except asyncio.CancelledError:  # the server stopped waiting for us (shutdown past its grace)
            self._close(_SHUTDOWN, scope)
            self.note = "cancelled at shutdown"
            # End the response cleanly ourselves (a started stream gets its last chunk; otherwise 503), so that
            # what the log says is what the client got.
            with contextlib.suppress(Exception):
                if self.status == 0:
                    await self.respond(503, _SHUTDOWN, close=True)
                else:
                    await self._send_now({"type": "http.response.body", "body": b"", "more_body": False})
            raise
        finally:
            watcher.cancel()

    async def _outcome(
        self, work: asyncio.Future[HttpResponse | GuestFailure], scope: RunScope, deadline: Deadline, component: Any
    ) -> HttpResponse | GuestFailure:
        # The deadline moves with every write (see `deadline`): wait, re-reading it, until it stays passed.
        while not work.done() and deadline.left() > 0:
            await asyncio.wait({work}, timeout=deadline.left())
        if not work.done():
            reason = overrun_reason(component.settings, deadline)
            # Tell the guest first: its generations end with an error naming the deadline, and its writes are still
            # taken for the grace, so it can end its response properly (a stream's last event, a JSON error).
            self.overrun = reason
            scope.cancel(reason)
            await asyncio.wait({work}, timeout=DEADLINE_GRACE_S)
            if not work.done():
                # It is interrupted now (epoch); answer without it (a guest blocked in a host call ends on its own).
                self._close(reason, scope)
                return GuestFailure(504, reason, DEADLINE)
        return work.result()

    async def _finish(self, outcome: HttpResponse | GuestFailure) -> None:
        if self.closed == _CLIENT_GONE:
            self.note = _CLIENT_GONE
            return
        if self.closed is not None and isinstance(outcome, HttpResponse):
            outcome = GuestFailure(504, self.closed)  # it answered, but only after its deadline
        if self.overrun is not None:  # the deadline passed, whether or not the guest ended its response in the grace
            self.failure = DEADLINE
        if isinstance(outcome, HttpResponse) and self.overrun is not None:
            self.note = f"ended within the grace: {self.overrun}"
        if isinstance(outcome, GuestFailure):
            self.failure = outcome.kind or self.failure
            self.note = outcome.reason
            if self.status == 0:
                await self.respond(outcome.status, outcome.reason)
            elif self.closed == _SHUTDOWN:  # cancelled at shutdown: the body ends cleanly where it got to
                await self._send_now({"type": "http.response.body", "body": b"", "more_body": False})
            # Otherwise streaming had begun: end the connection without the final chunk, so the client sees a cut
            # body.
            return
        if self.status == 0:
            problem = head_problem(outcome.status, outcome.headers)
            if problem is not None:
                self.note = f"invalid response: {problem}"
                await self.respond(500, f"the guest returned an invalid response: {problem}")
                return
            headers = _encode_headers(outcome.headers)
            if outcome.status not in _NO_BODY:
                headers.append((b"content-length", str(len(outcome.body)).encode()))
            await self._send_now({"type": "http.response.start", "status": outcome.status, "headers": headers})
            self.status = outcome.status
        body = b"" if self.status in _NO_BODY else outcome.body
        await self._send_now({"type": "http.response.body", "body": body, "more_body": False})

    async def respond(self, status: int, text: str, close: bool = False) -> None:
        """A whole plain-text response (errors and the like). `close`: the connection ends after it."""
        body = (text + "\n").encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        if close or status == 413:  # the unread body makes the connection unusable for another request
            headers.append((b"connection", b"close"))
        try:
            await self._send_now({"type": "http.response.start", "status": status, "headers": headers})
            self.status = status
            await self._send_now({"type": "http.response.body", "body": body, "more_body": False})
        except OSError:
            self.note = _CLIENT_GONE

    async def respond_unauthorized(self) -> None:
        """401 in OpenAI's (or Anthropic's) error shape (see `auth`); the presented key is never logged."""
        body = unauthorized_body(self.headers)
        headers = [
            (b"content-type", b"application/json"),
            (b"www-authenticate", b'Bearer realm="llmhost"'),
            (b"content-length", str(len(body)).encode()),
        ]
        self.note = "no valid API key"
        try:
            await self._send_now({"type": "http.response.start", "status": 401, "headers": headers})
            self.status = 401
            await self._send_now({"type": "http.response.body", "body": body, "more_body": False})
        except OSError:
            self.note = _CLIENT_GONE

    async def _send_now(self, message: Message) -> None:
        async with self._send_lock:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._count()  # before the last byte: a client that has its answer finds it in the metrics
            await self._send(message)

    @property
    def final_status(self) -> int:
        """The status the client got (499: none, it left first), as the log and the metrics tell it."""
        return self.status or CLIENT_CLOSED_STATUS

    def _count(self) -> None:
        """The request in the metrics, once: at its response's end, or when it ends without one (499)."""
        if not self._counted:
            self._counted = True
            self._app.observer.request(self.component, self.final_status, time.monotonic() - self._arrived)
            if self.failure is not None:
                self._app.observer.failure(self.component, self.failure)

    async def _read_body(self, limit: int) -> bytes | None:
        """The whole body, or None when it is over `limit` (or the client left)."""
        declared = dict(self.headers).get("content-length", "")
        body = await read_body(self._receive, int(declared) if declared.isdigit() else None, limit)
        if isinstance(body, bytes):
            return body
        if body == 0:
            self.closed = _CLIENT_GONE
        return None

    async def _watch_disconnect(self, scope: RunScope) -> None:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self._close(_CLIENT_GONE, scope)

    def _close(self, reason: str, scope: RunScope) -> None:
        if self.closed is None:
            self.closed = reason
        scope.cancel(reason)

    # -- called (through ThreadWriter) for the guest's writer ---------------------------------------------

    async def send_head(self, status: int, headers: HttpFields) -> None:
        async with self._send_lock:
            if self.closed is not None:
                raise WriteClosed(self.closed)
            if self.status:
                raise WriteInvalid("the response was already started")
            try:
                await self._send({"type": "http.response.start", "status": status, "headers": _encode_headers(headers)})
            except OSError:
                self.closed = _CLIENT_GONE
                raise WriteClosed(_CLIENT_GONE) from None
            self.status = status

    async def send_chunk(self, chunk: bytes) -> None:
        async with self._send_lock:
            if self.closed is not None:
                raise WriteClosed(self.closed)
            try:
                await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
            except OSError:
                self.closed = _CLIENT_GONE
                raise WriteClosed(_CLIENT_GONE) from None

    def call(self, coroutine: Coroutine[Any, Any, None], deadline: Deadline) -> None:
        """From the guest's thread: run `coroutine` on the loop and wait for it, at most until the deadline (and its
        grace); the bytes reaching the connection move the deadline on."""
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        except RuntimeError:  # the loop is gone: the server has stopped
            coroutine.close()
            raise WriteClosed("the server has stopped") from None
        try:
            future.result(timeout=deadline.left() + DEADLINE_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise WriteClosed("the request's deadline passed") from None
        except concurrent.futures.CancelledError:
            raise WriteClosed("the server is shutting down") from None
        if self.overrun is None:
            deadline.progress()


class ThreadWriter:
    """The `response-writer` a guest gets (`interfaces.http.ResponseWriter`); its methods run on the guest's
    thread and block until the loop has sent the bytes."""

    def __init__(self, exchange: Exchange, deadline: Deadline) -> None:
        self.request_id = exchange.request_id
        self._exchange = exchange
        self._deadline = deadline
        self._started = False

    def start(self, status: int, headers: HttpFields) -> None:
        if self._started:
            raise WriteInvalid("start was already called: a response has one status line")
        problem = head_problem(status, headers)
        if problem is not None:
            raise WriteInvalid(problem)
        self._exchange.call(self._exchange.send_head(status, headers), self._deadline)
        self._started = True

    def time_left_ms(self) -> int:
        if self._exchange.overrun is not None:
            return 0  # the deadline has passed: the guest is in its grace
        return int(self._deadline.left() * 1000)

    def run_budget_s(self) -> float:
        if self._exchange.overrun is not None:  # told of its deadline: what is left of the grace, no more
            return DEADLINE_GRACE_S
        return self._deadline.left() + DEADLINE_GRACE_S

    def write(self, chunk: bytes) -> None:
        if not self._started:
            raise WriteInvalid("write before start: call start(status, headers) first")
        if chunk:
            self._exchange.call(self._exchange.send_chunk(chunk), self._deadline)
