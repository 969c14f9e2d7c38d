"""uvicorn's h11 protocol with a time limit on request heads, and malformed framing refused at once.

uvicorn closes idle keep-alive connections but sets no limit on how long a client may take to send a request's
head, so slow-loris clients (a byte a second) keep connections open for as long as they like. This protocol
closes a connection whose request line and headers have not all arrived `header_timeout_s` after the connection
opened, or after its previous response ended. A request answered before its body was read (413 on its declared
length, 401) keeps its connection while the rest of the body is read and dropped, so that the client, still
sending, gets to read the answer; that rest must arrive within `header_timeout_s` too.

h11 waits for a request's whole head before it parses the request line, and takes any chunk size of up to 20 hex
digits, so an HTTP/0.9 request (`GET /`, no version) waited for the header timeout and a chunk of 2^80 bytes for
the body timeout. Here a first line that is not an HTTP/1.x request line gets 400 as soon as it ends, and so does
a chunk size over `MAX_CHUNK_SIZE`; a chunk larger than every component's `max-body-bytes` gets 413; either
way the connection is closed at once (nothing after it is read).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from llmhost.domain.limits import MAX_CHUNK_SIZE

# RFC 9112 §3: method SP request-target SP HTTP-version (h11 checks the rest once the head is complete).
REQUEST_LINE = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+ [\x21-\x7e\x80-\xff]+ HTTP/[0-9]\.[0-9]")


def framing_problem(received: bytes) -> str | None:
    """Why the start of a connection's next request can never be a valid HTTP/1.x request (None: it may be).
    `received`: the bytes buffered for it so far; only its first line, once complete, is judged."""
    head = received.lstrip(b"\r\n")  # empty lines before a request line are allowed (RFC 9112 §2.2)
    end = head.find(b"\n")
    if end < 0:
        return None
    line = head[:end].removesuffix(b"\r")
    if REQUEST_LINE.fullmatch(line):
        return None
    if re.fullmatch(rb"\S+ \S+", line):
        return "an HTTP/0.9 request line (no HTTP version) is not served"
    return "malformed request line"


def chunk_problem(chunk_size: int, max_body_bytes: int) -> tuple[int, str] | None:
    """The status and reason for a chunk size no request can be served with (None: it is fine)."""
    if chunk_size > MAX_CHUNK_SIZE:
        return 400, f"chunk size {chunk_size:x} is out of range"
    if chunk_size > max_body_bytes:
        return 413, f"a chunk of {chunk_size} bytes is over every route's body limit ({max_body_bytes} bytes)"
    return None


def protocol_with_header_timeout(header_timeout_s: float, max_body_bytes: int = 2**63) -> type[H11Protocol]:
    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.is_closing():
                return
            state = self.conn.their_state
            if state is h11.IDLE:
                if b"\n" in data and (problem := framing_problem(self.conn.trailing_data[0])) is not None:
                    self._refuse(400, problem)
                return
            if self.conn.our_state is not h11.DONE:
                self._disarm_head_timer()  # the whole head of a request has arrived
            # (else it was answered before its body was read, e.g. 413: the rest is drained under the timer)
            if state is h11.SEND_BODY:
                # h11 keeps the size of the chunk being read here (not part of its API: absent, nothing is checked)
                remaining = getattr(getattr(self.conn, "_reader", None), "_bytes_in_chunk", 0)
                if isinstance(remaining, int) and (refusal := chunk_problem(remaining, max_body_bytes)) is not None:
                    self._refuse(*refusal)

        def _refuse(self, status: int, reason: str) -> None:
            """Answer `status` with `reason` and close the connection, whatever state h11 is in: a request that
            is being served is then told its client went away (its guest's later writes go nowhere)."""
            self.logger.info("refused a request from %s: %s", self.client[0] if self.client else "?", reason)
            body = reason.encode() + b"\n"
            phrase = b"Bad Request" if status == 400 else b"Content Too Large"
            head = b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n" % (status, phrase)
            cycle = self.cycle
            if cycle is None or cycle.response_complete or not cycle.response_started:
                self.transport.write(head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
            self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.our_state is h11.IDLE or self.conn.our_state is h11.DONE:
                self._arm_head_timer()  # the next request's head must come in time too

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._disarm_head_timer()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            draining = self.conn.their_state is h11.SEND_BODY and self.conn.our_state is h11.DONE
            if (self.conn.their_state is h11.IDLE or draining) and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
