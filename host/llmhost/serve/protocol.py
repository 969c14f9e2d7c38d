"""uvicorn's h11 protocol with a time limit on request heads.

uvicorn closes idle keep-alive connections but sets no limit on how long a client may take to send a request's
head, so slow-loris clients (a byte a second) keep connections open for as long as they like. This protocol
closes a connection whose request line and headers have not all arrived `header_timeout_s` after the connection
opened, or after its previous response ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol_with_header_timeout(header_timeout_s: float) -> type[H11Protocol]:
    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the whole head of a request has arrived
                self._disarm_head_timer()

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
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
