"""Open `inference-stream` resources: handles for guests, idle expiry, cancellation on drop.

A stream holds an engine slot until it ends, so a guest that neither reads nor drops its stream must not hold
it forever: a stream idle for longer than `idle_timeout_s` is cancelled by a reaper thread, and its next
`next()` reports why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmhost.domain.errors import EngineError
from llmhost.domain.limits import MAX_OPEN_STREAMS_KEY, STREAM_IDLE_TIMEOUT_KEY
from llmhost.domain.types import StreamEvent
from llmhost.engine.base import Generation
from llmhost.run.scope import HandleTable
from llmhost.run.service import ScopeLimits
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

# Host resource type id of `inference-stream` (any distinct integers; wasmtime checks a handle's type against them).
STREAM_TYPE_ID = 1


@dataclass
class _Handle:
    generation: Generation
    last_used: float
    busy: bool = False  # inside `next()`: never reaped mid-step
    finished: bool = False
    expired: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StreamTable:
    """A run's open streams: a `HandleTable` of them, plus idle expiry (a reaper thread, started with the first
    stream)."""

    def __init__(
        self,
        idle_timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        limit: int | None = None,
    ) -> None:
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._handles = HandleTable[_Handle]("stream", limit, MAX_OPEN_STREAMS_KEY)
        self._lock = threading.Lock()  # starts the reaper once
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    def __len__(self) -> int:
        return len(self._handles)

    def check_room(self) -> None:
        """Raise `InvalidInput` naming the quota key when this table holds its limit of open streams."""
        self._handles.check_room()

    def open(self, generation: Generation) -> int:
        rep = self._handles.add(_Handle(generation, self._clock()))
        with self._lock:
            self._start_reaper()
        return rep

    def next(self, rep: int) -> StreamEvent | None:
        """The next event, or None after the last one. Raises `EngineError` for an expired stream."""
        handle = self._handles.find(rep)
        if handle is None:
            raise EngineError("this stream was already closed")
        with handle.lock:
            if handle.expired is not None:
                raise EngineError(handle.expired)
            if handle.finished:
                return None
            handle.busy = True
        event: StreamEvent | None = None  # stays None when the step raises: the stream is over either way
        try:
            event = next(handle.generation, None)
        finally:
            with handle.lock:
                handle.busy = False
                handle.last_used = self._clock()
                if event is None:
                    handle.finished = True
        return event

    def drop(self, rep: int) -> None:
        """The guest dropped its handle: cancel the generation (no further decode steps) and free its slot."""
        handle = self._handles.pop(rep)
        if handle is not None:
            handle.generation.close()

    def reap(self) -> int:
        """Cancel every stream idle for longer than the limit; returns how many were cancelled."""
        if self._idle_timeout_s is None:
            return 0
        now = self._clock()
        handles = self._handles.values()
        cancelled = 0
        for handle in handles:
            with handle.lock:
                idle = now - handle.last_used
                if handle.busy or handle.finished or handle.expired or idle <= self._idle_timeout_s:
                    continue
                handle.expired = (
                    f"the stream was idle for {idle:.1f} s, longer than the limit of {self._idle_timeout_s} s, "
                    f"and was cancelled (read it more often, or raise `{STREAM_IDLE_TIMEOUT_KEY}` in the config)"
                )
            handle.generation.close()
            cancelled += 1
        return cancelled

    def close(self) -> None:
        self._stop.set()
        for handle in self._handles.drain():
            handle.generation.close()

    def _start_reaper(self) -> None:
        if self._reaper is not None or self._idle_timeout_s is None:
            return
        period = min(1.0, self._idle_timeout_s / 4)

        def run() -> None:
            while not self._stop.wait(period):
                self.reap()

        self._reaper = threading.Thread(target=run, name="llmhost-stream-reaper", daemon=True)
        self._reaper.start()


def scope_streams(store: Any, limits: ScopeLimits) -> StreamTable:
    """The streams of the run `store` belongs to (closed, cancelling each, when the run ends)."""
    return scope_of(store).table(
        "streams",
        lambda: StreamTable(limits.stream_idle_timeout_s, limit=limits.max_open_streams),
        StreamTable.close,
        first=True,
    )


def stream_dropped(limits: ScopeLimits, what: str) -> Callable[[Any, int], None]:
    """The destructor of a stream resource (`inference-stream`, `chat-completion-stream`): cancel the stream."""

    def destructor(store: Any, rep: int) -> None:
        # Runs when the guest drops its handle; like any host function it must not raise.
        try:
            scope_streams(store, limits).drop(rep)
        except Exception:  # a failure to cancel must not trap the guest that dropped the stream
            _log.exception("cancelling %s %d failed", what, rep)

    return destructor
