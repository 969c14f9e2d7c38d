"""The model's lock: a reentrant lock that knows whether another thread waits for it.

The scheduler's bursts (planning.BURST_STEPS decode steps in a row, under this lock) end after the step under way
when anyone else needs the model: a new generation, a cancellation, an append, embeddings. Without this, they would
wait for the whole burst.
"""

from __future__ import annotations

import threading
from typing import Any


class ModelLock:
    """`threading.RLock`, plus `contended`: whether some thread is blocked acquiring it. It works with
    `threading.Condition` as an RLock does (its wait releases every level of a nested hold)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # One entry per blocked thread: list appends and pops are atomic under the GIL, where `+= 1` is not.
        self._blocked: list[None] = []

    @property
    def contended(self) -> bool:
        return bool(self._blocked)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        self._blocked.append(None)
        try:
            return self._lock.acquire(True, timeout)
        finally:
            self._blocked.pop()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    # What threading.Condition uses of an RLock (its wait releases all levels, then restores them).
    def _release_save(self) -> Any:
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._blocked.append(None)
        try:
            self._lock._acquire_restore(state)  # type: ignore[attr-defined]
        finally:
            self._blocked.pop()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]
