"""Which loaded models to unload, and when: the keep-alive and memory-budget policy as pure functions of the models'
state (model_pool.py applies them under its lock and does the loading and closing).

A model is idle when nothing pins it: no generation in flight, no open sequence (its KV cache lives in the model),
no call running on it. An idle model unloads once its `keep-alive-s` has passed since its last use (0: at once;
`KEEP_FOREVER`: never). A model that does not fit in `[engine] memory-budget-mb` unloads the least recently used
idle models first, as few as make room; a model kept forever is never unloaded for room either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmhost.config import KEEP_ALIVE_FOREVER

KEEP_FOREVER = KEEP_ALIVE_FOREVER  # `keep-alive-s = -1`: loaded until the host closes


@dataclass(frozen=True)
class Resident:
    """One loaded (or loading) model, as the policy sees it."""

    name: str
    bytes: int  # its memory footprint (model_footprint.py)
    pins: int  # what holds it now: generations in flight, open sequences, calls running on it
    last_use: float  # when it was last released (or loaded), as the pool's clock reads it
    keep_alive_s: float  # KEEP_FOREVER, 0 (unload as soon as idle), or seconds
    settled: bool = True  # loaded and not being unloaded: a model still loading or closing is no candidate

    @property
    def idle(self) -> bool:
        return self.pins == 0 and self.settled

    @property
    def evictable(self) -> bool:
        """May be unloaded to make room for another model."""
        return self.idle and self.keep_alive_s != KEEP_FOREVER


def expired(residents: Iterable[Resident], now: float) -> list[str]:
    """The idle models whose keep-alive has run out at `now`."""
    return [
        r.name for r in residents if r.idle and r.keep_alive_s != KEEP_FOREVER and now - r.last_use >= r.keep_alive_s
    ]


def next_expiry(residents: Iterable[Resident]) -> float | None:
    """When the next idle model's keep-alive runs out (None: no idle model will expire)."""
    ends = [r.last_use + r.keep_alive_s for r in residents if r.idle and r.keep_alive_s != KEEP_FOREVER]
    return min(ends, default=None)


def lru_order(residents: Iterable[Resident]) -> list[Resident]:
    """The evictable models, least recently used first (ties by name, so the order is total)."""
    return sorted((r for r in residents if r.evictable), key=lambda r: (r.last_use, r.name))


def evictions(residents: Iterable[Resident], need: int, budget: int) -> list[str] | None:
    """The models to unload so that `need` more bytes fit in `budget`: the shortest run of the LRU order that makes
    room. [] when it fits already; None when unloading every evictable model would still not make room (the
    caller waits for a pin to go, or fails)."""
    residents = list(residents)
    used = sum(r.bytes for r in residents)
    if used + need <= budget:
        return []
    chosen: list[str] = []
    for resident in lru_order(residents):
        chosen.append(resident.name)
        used -= resident.bytes
        if used + need <= budget:
            return chosen
    return None
