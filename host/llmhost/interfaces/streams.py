"""Open `inference-stream` resources: handles for guests, idle expiry, cancellation on drop.

A stream holds an engine slot until it ends, so a guest that neither reads nor drops its stream must not hold
it forever: a stream idle for longer than `idle_timeout_s` is cancelled by a reaper thread, and its next
`next()` reports why.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine.base import Generation
from ..types import EngineError, InvalidInput, StreamEvent

IDLE_TIMEOUT_KEY = "sandbox.stream-idle-timeout-s"
MAX_OPEN_KEY = "sandbox.max-open-streams"


@dataclass
class _Handle:
    generation: Generation
    last_used: float
    busy: bool = False  # inside `next()`: never reaped mid-step
    finished: bool = False
    expired: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StreamTable:
    def __init__(
        self,
        idle_timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        limit: int | None = None,
    ) -> None:
        self._idle_timeout_s = idle_timeout_s
        self._limit = limit
        self._clock = clock
        self._handles: dict[int, _Handle] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)

    def check_room(self) -> None:
        """Raise `InvalidInput` naming the quota key when this table holds its limit of open streams."""
        if self._limit is not None and len(self) >= self._limit:
            raise InvalidInput(
                f"this run already holds {self._limit} open streams, its limit (drop some first, or raise "
                f"`{MAX_OPEN_KEY}` in the config)"
            )

    def open(self, generation: Generation) -> int:
        handle = _Handle(generation, self._clock())
        with self._lock:
            rep = next(self._ids)
            self._handles[rep] = handle
            self._start_reaper()
        return rep

    def next(self, rep: int) -> StreamEvent | None:
        """The next event, or None after the last one. Raises `EngineError` for an expired stream."""
        with self._lock:
            handle = self._handles.get(rep)
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
        with self._lock:
            handle = self._handles.pop(rep, None)
        if handle is not None:
            handle.generation.close()

    def reap(self) -> int:
        """Cancel every stream idle for longer than the limit; returns how many were cancelled."""
        if self._idle_timeout_s is None:
            return 0
        now = self._clock()
        with self._lock:
            handles = list(self._handles.values())
        cancelled = 0
        for handle in handles:
            with handle.lock:
                idle = now - handle.last_used
                if handle.busy or handle.finished or handle.expired or idle <= self._idle_timeout_s:
                    continue
                handle.expired = (
                    f"the stream was idle for {idle:.1f} s, longer than the limit of {self._idle_timeout_s} s, "
                    f"and was cancelled (read it more often, or raise `{IDLE_TIMEOUT_KEY}` in the config)"
                )
            handle.generation.close()
            cancelled += 1
        return cancelled

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            handles, self._handles = list(self._handles.values()), {}
        for handle in handles:
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
