"""How long a request may run, and how that applies to streamed responses.

The policy (documented in docs/serve.md):

- `limits.deadline-s` bounds the time to the first byte (from the request's arrival to the response's start, or
  to the whole response when the guest does not stream) and, once a response streams, the idle time between two
  writes: every byte the client receives pushes the deadline `deadline-s` further. A long answer that keeps making
  progress is therefore never cut by it; a guest that stalls is.
- `limits.max-duration-s` caps the whole request, streaming included, however steadily it writes: a runaway guest
  is always stopped.
- At the deadline the guest is *told* before it is stopped: its generations are cancelled (their next call
  returns `runtime-error` naming the deadline) and its writes are still taken for `DEADLINE_GRACE_S`, so it
  can end its response properly (an SSE stream its last event, a JSON API its error); the instance is interrupted
  (epoch) only after that grace. `response-writer.time-left-ms` reads the current deadline, so a guest can also
  wind down before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """A request's moving deadline: `idle_s` after its arrival or its last write, never past `max_duration_s` after
    its arrival. Read from the event loop and the guest's thread; a float store is atomic, so no lock is needed."""

    def __init__(
        self, arrived: float, idle_s: float, max_duration_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._idle_s = idle_s
        self._cap = arrived + max_duration_s
        self._last = arrived
        self._clock = clock

    def progress(self) -> None:
        """Bytes reached the client: the idle deadline starts again."""
        self._last = self._clock()

    def at(self) -> float:
        return min(self._last + self._idle_s, self._cap)

    def left(self) -> float:
        """Seconds until the deadline (0 once it has passed)."""
        return max(0.0, self.at() - self._clock())

    def capped(self) -> bool:
        """Whether the deadline now is the cap on the whole request (not the idle time)."""
        return self._cap <= self._last + self._idle_s
