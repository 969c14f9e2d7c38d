"""One host-wide budget for the host memory that byte lists cost while they are handed into guests.

wasmtime-py 50's C API passes a `list<u8>` as one 32-byte value per byte, and wasmtime converts that array again
before it copies it into the guest: about `LOWERED_BYTES_PER_BYTE` bytes of host memory per byte, for as long as
the hand-over takes. Each transfer that can be large (an outbound response body, a key-value value, an http-app
request body) reserves its real cost here first, and waits (within its deadline) while others hold the budget;
one that cannot get it in time fails with `too-large`, naming the config key. So the sum is bounded by the host,
whatever the concurrency and the per-grant limits allow.
"""

from __future__ import annotations

import os
import threading
import time

from llmhost.domain.errors import TooLarge
from llmhost.domain.limits import (
    LOWERED_BYTES_PER_BYTE,
    TRANSFER_MEMORY_FRACTION,
    TRANSFER_MEMORY_KEY,
    TRANSFER_MEMORY_MAX_MB,
    TRANSFER_MEMORY_MIN_MB,
)


def default_transfer_memory_mb() -> int:
    """The default budget: a share of this machine's memory, within fixed bounds."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform tells
        return TRANSFER_MEMORY_MIN_MB
    share = int(total * TRANSFER_MEMORY_FRACTION) // (1024 * 1024)
    return max(TRANSFER_MEMORY_MIN_MB, min(TRANSFER_MEMORY_MAX_MB, share))


def lowered_cost(size: int) -> int:
    """Host bytes that handing `size` bytes into a guest takes at its peak."""
    return size * LOWERED_BYTES_PER_BYTE


class TransferBudget:
    """Reservations of host memory for transfers into guests, at most `limit_bytes` at once (FIFO is not needed:
    a waiter that cannot fit times out at its own deadline, and a freed reservation wakes every waiter)."""

    def __init__(self, limit_mb: int | None = None, key: str = TRANSFER_MEMORY_KEY) -> None:
        self.limit_bytes = (default_transfer_memory_mb() if limit_mb is None else limit_mb) * 1024 * 1024
        self.key = key
        self._used = 0
        self._peak = 0
        self._changed = threading.Condition()

    @property
    def used(self) -> int:
        with self._changed:
            return self._used

    @property
    def peak(self) -> int:
        """The most ever reserved at once (for tests and benchmarks)."""
        with self._changed:
            return self._peak

    def reserve(self, cost: int, what: str, wait_s: float | None) -> int:
        """Reserve `cost` bytes, waiting up to `wait_s` seconds (None: without waiting past the default deadline)
        for others to release theirs. Returns the cost to `release`. `TooLarge` naming the key when it cannot
        fit: larger than the whole budget, or not freed in time."""
        if cost <= 0:
            return 0
        limit_mb = self.limit_bytes // (1024 * 1024)
        if cost > self.limit_bytes:
            raise TooLarge(
                f"{what} would take {cost // (1024 * 1024)} MB of host memory to hand to the guest, more than the "
                f"host's whole budget of {limit_mb} MB (`{self.key}`); read it in chunks (outbound-http "
                "`send-streamed`, the SDK's `http.fetch`) or raise the budget"
            )
        deadline = time.monotonic() + (wait_s if wait_s is not None else 0.0)
        with self._changed:
            while self._used + cost > self.limit_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TooLarge(
                        f"{what} needs {cost // (1024 * 1024)} MB of host memory to hand to the guest, and other "
                        f"transfers held the host's budget of {limit_mb} MB (`{self.key}`) until the deadline"
                    )
                self._changed.wait(left)
            self._used += cost
            self._peak = max(self._peak, self._used)
        return cost

    def release(self, cost: int) -> None:
        if cost <= 0:
            return
        with self._changed:
            self._used = max(0, self._used - cost)
            self._changed.notify_all()
