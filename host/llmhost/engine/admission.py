"""One admission queue per model: every kind of work waits for the model's capacity here, first come, first served.

Generations, score, beam search, next-token reads, embeddings (local) and requests in flight (remote) each submit
a `Ticket` whose `take()` claims what the work needs (a sequence slot, the embedding context, a request in
flight) if it is free now. Only the first ticket waiting for a capacity may take: a kind of work that needs much
never waits behind a stream of small ones, and none starves another. Capacities are apart (`Ticket.needs`): a
generation waiting for a slot never waits behind embeddings calls queued for the embedding context, nor they
behind it. A ticket is admitted either by its own thread (`wait`: blocking callers) or by whoever runs `admit()`
under the lock (the scheduler's step, a freed slot), which then calls its `on_admit`. Past `ADMISSION_TIMEOUT_S`
first in line without room, a ticket fails with one message naming the config key that adds capacity. Nothing
here waits on its own except `wait`, and the pool behind `take` never does.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmhost import telemetry
from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.limits import ADMISSION_TIMEOUT_S

# A caller waiting with a cancellation check looks at it this often (a cancelled run leaves the queue by then).
CHECK_EVERY_S = 0.1

# The capacity most work needs (a model's sequence slots, a remote server's requests in flight); a local model's
# embedding context is another (`Ticket.needs`).
SLOTS = "slots"


@dataclass(eq=False)  # compared by identity
class Ticket:
    kind: str  # what waits: "generation", "score", "beam-search", "next-logits", "embeddings", "request"
    take: Callable[[], bool]  # claim the capacity now if it is free (lock held); True when claimed
    needs: str = SLOTS  # which capacity `take` claims: tickets wait in arrival order for each one apart
    on_admit: Callable[[], None] = lambda: None  # runs (lock held) right after `take` succeeded
    on_fail: Callable[[LlmError], None] = lambda error: None  # runs (lock held) when the ticket times out
    submitted_at: float = field(default_factory=time.monotonic)
    admitted: bool = False
    error: LlmError | None = None


class AdmissionQueue:
    """The FIFO of one model's waiting work. `lock` is the model's (an RLock for local models): `take`, `on_admit`
    and `on_fail` run under it, and `wait` releases it while it sleeps."""

    def __init__(
        self,
        lock: Any,
        what: str,
        capacity_key: str,
        timeout_s: float = ADMISSION_TIMEOUT_S,
        on_wait: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.lock = lock
        self._on_wait = on_wait  # each admission's wait in the queue, in seconds (the metrics' histogram)
        self._what = what  # "the 4 sequence slots of gemma-3-270m"
        self._capacity_key = capacity_key  # "models.gemma-3-270m.slots"
        self._timeout_s = timeout_s
        self._queue: collections.deque[Ticket] = collections.deque()
        self._changed = threading.Condition(lock)
        self.admitted: collections.deque[str] = collections.deque(maxlen=256)  # the latest admissions' kinds

    def __len__(self) -> int:
        with self.lock:
            return len(self._queue)

    @property
    def waiting(self) -> int:
        """Tickets in the queue now, read without the lock (for metrics: never waits behind a decode step)."""
        return len(self._queue)

    def kinds(self) -> list[str]:
        """The kinds waiting, head first."""
        with self.lock:
            return [t.kind for t in self._queue]

    def timeout_error(self) -> EngineError:
        return EngineError(
            f"{self._what} stayed busy for {self._timeout_s:.0f} s (raise `{self._capacity_key}` in the config)"
        )

    def submit(self, ticket: Ticket) -> None:
        with self.lock:
            self._queue.append(ticket)

    def cancel(self, ticket: Ticket) -> None:
        """Take `ticket` out of the queue (a cancelled generation, a caller that gave up)."""
        with self.lock:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._changed.notify_all()  # the next ticket may be the head now

    def admit(self, now: float | None = None) -> bool:
        """Admit, for each capacity, from the first ticket waiting for it while that one's `take` succeeds; fail
        one that waited first in line past the timeout. Returns whether any ticket left the queue. Called with the
        lock held, or takes it."""
        with self.lock:
            now = time.monotonic() if now is None else now
            left = False
            blocked: set[str] = set()  # capacities whose first ticket could not take: the rest of them wait
            for ticket in list(self._queue):
                if ticket.needs in blocked:
                    continue
                if ticket.take():
                    self._queue.remove(ticket)
                    ticket.admitted = True
                    self.admitted.append(ticket.kind)
                    self._on_wait(max(0.0, now - ticket.submitted_at))
                    ticket.on_admit()
                elif now - ticket.submitted_at > self._timeout_s:
                    self._queue.remove(ticket)
                    ticket.error = self.timeout_error()
                    ticket.on_fail(ticket.error)
                else:
                    blocked.add(ticket.needs)
                    continue
                left = True
            if left:
                self._changed.notify_all()
            return left

    def changed(self) -> None:
        """Capacity may have freed up (a slot, a request in flight): waiting tickets look again."""
        with self.lock:
            self.admit()
            self._changed.notify_all()

    def try_enter(self, take: Callable[[], bool], needs: str = SLOTS) -> bool:
        """Claim capacity now if nobody waits for it before us and it is free; never waits (an append that can also
        be evaluated later)."""
        with self.lock:
            if any(ticket.needs == needs for ticket in self._queue) or not take():
                return False
            self.admitted.append("direct")  # nobody waited: taken at once
            return True

    def enter(
        self, kind: str, take: Callable[[], bool], check: Callable[[], None] | None = None, needs: str = SLOTS
    ) -> None:
        """Claim capacity in turn: at once when nobody waits for it and it is free, else wait in the queue
        (`wait`)."""
        with self.lock:
            if self.try_enter(take, needs):
                self._on_wait(0.0)
            else:
                with telemetry.span("llm.queue", {"llmhost.work": kind}):  # traced: the wait is a span
                    self.wait(Ticket(kind, take, needs=needs), check)

    def wait(self, ticket: Ticket, check: Callable[[], None] | None = None) -> None:
        """Submit `ticket` and block until it is admitted. Raises the timeout error, or whatever `check()` raises
        (a cancelled run: the ticket leaves the queue). The lock may be held by the caller: it is released while
        waiting and held again on return."""
        with self.lock:
            self._queue.append(ticket)
            try:
                while True:
                    self.admit()
                    if ticket.admitted:
                        return
                    if ticket.error is not None:
                        raise ticket.error
                    if check is not None:
                        check()
                    # Woken by `changed` or `admit`; a run's cancellation is looked at every CHECK_EVERY_S.
                    left = self._timeout_s - (time.monotonic() - ticket.submitted_at) + 0.01
                    self._changed.wait(max(0.0, min(left, CHECK_EVERY_S) if check is not None else left))
            except BaseException:
                if not ticket.admitted and ticket in self._queue:
                    self._queue.remove(ticket)
                    self._changed.notify_all()
                raise
