"""`ModelPool`: a local backend's models, by name, loaded on demand and unloaded when idle.

A model loads at its first use (once, however many callers ask at the same time: the others wait for that load),
and is pinned while something uses it (`acquire`/`release`, or `lease`): a generation in flight, an open sequence,
a call running on it. Unpinned, it is idle: the reaper thread unloads it once its `keep-alive-s` has passed, and a
model that needs room under `[engine] memory-budget-mb` unloads the least recently used idle ones first
(residency.py's policy). When nothing can make room, the caller waits for a model to go idle, up to its run's
deadline (or `wait_s`), then fails with an `EngineError` naming the budget and the models that hold it.

Lock order: a model's own lock may be held when `release` is called (a generation's end), so nothing here takes a
model's lock while holding the pool's: models are loaded and closed outside it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError
from llmhost.domain.limits import ADMISSION_TIMEOUT_S
from llmhost.engine.base import configured
from llmhost.engine.local.residency import KEEP_FOREVER, Resident, evictions, expired, next_expiry
from llmhost.engine.remote.bounds import call_ends

MB = 1024 * 1024


class Closable(Protocol):
    def close(self) -> None: ...


M = TypeVar("M", bound=Closable)
State = Literal["unloaded", "loading", "loaded", "unloading"]


@dataclass
class _Entry(Generic[M]):
    config: ModelConfig
    model: M | None = None
    state: State = "unloaded"
    bytes: int = 0  # held (or reserved, while loading)
    estimate: int | None = None  # its footprint, computed once
    pins: int = 0
    last_use: float = 0.0
    loads: int = 0
    unloads: int = 0


@dataclass(frozen=True)
class ModelState:
    """One model's residency now (`llmhost models`, tests)."""

    name: str
    state: State
    bytes: int  # its footprint while loaded, else 0
    pins: int
    idle_s: float | None  # seconds since its last use, while loaded and idle
    keep_alive_s: float
    loads: int
    unloads: int


class ModelPool(Generic[M]):
    def __init__(
        self,
        configs: Mapping[str, ModelConfig],
        load: Callable[[str, ModelConfig], M],
        *,
        size: Callable[[str, ModelConfig], int] = lambda name, config: 0,
        budget_bytes: int | None = None,
        on_loaded: Callable[[str, int], None] = lambda name, size: None,
        on_unloaded: Callable[[str], None] = lambda name: None,
        wait_s: float = ADMISSION_TIMEOUT_S,
    ) -> None:
        """`size(name, config)`: the model's footprint in bytes (footprint.py), before it loads. `on_loaded` and
        `on_unloaded` run under the pool's lock (metrics: they must not call back in)."""
        self.configs = dict(configs)
        self._entries: dict[str, _Entry[M]] = {name: _Entry(config) for name, config in self.configs.items()}
        self._load = load
        self._size = size
        self.budget_bytes = budget_bytes
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._wait_s = wait_s
        self._changed = threading.Condition(threading.Lock())
        self._closed = False
        self._reaper: threading.Thread | None = None

    # --- using models --------------------------------------------------------------------------------------
    def acquire(self, name: str) -> M:
        """The loaded model, pinned (loaded now if it is not): `release(name)` once done with it."""
        configured(self.configs, name)  # an unknown name: ModelNotSupported naming the configured ones
        entry = self._entries[name]
        if entry.estimate is None:
            entry.estimate = self._size(name, entry.config)  # outside the lock: it may resolve a file (a download)
        ends, _ = call_ends(self._wait_s)
        with self._changed:
            while True:
                if self._closed:
                    raise EngineError(f"model {name!r} is unavailable: the engine is closed")
                if entry.state == "loaded":
                    assert entry.model is not None
                    entry.pins += 1
                    return entry.model
                if entry.state == "unloaded":
                    victims = self._room_for(name, entry)
                    if victims is not None:
                        break
                # Loading or unloading elsewhere, or no room yet: wait for a change, up to the deadline.
                left = ends - time.monotonic()
                if left <= 0:
                    raise self._timeout_error(name, entry)
                self._changed.wait(left)
            for victim in victims:
                self._entries[victim].state = "unloading"
            entry.state, entry.bytes = "loading", entry.estimate
        self._unload(victims)
        try:
            model = self._load(name, entry.config)
        except BaseException:
            with self._changed:
                entry.state, entry.bytes = "unloaded", 0
                self._changed.notify_all()
            raise
        with self._changed:
            entry.model, entry.state, entry.pins = model, "loaded", 1
            entry.loads += 1
            entry.last_use = time.monotonic()
            self._on_loaded(name, entry.bytes)
            self._changed.notify_all()
            closed = self._closed
            if not closed and entry.config.keep_alive_s != KEEP_FOREVER:
                self._start_reaper()
        if closed:  # closed while it loaded: nobody will close it otherwise
            model.close()
            raise EngineError(f"model {name!r} is unavailable: the engine is closed")
        return model

    def release(self, name: str) -> None:
        """Unpin: the model is idle once nothing else pins it, and its keep-alive starts. Cheap, and safe under a
        model's lock (a generation's end calls it)."""
        with self._changed:
            entry = self._entries[name]
            entry.pins -= 1
            entry.last_use = time.monotonic()
            if entry.pins == 0:
                self._changed.notify_all()  # the reaper, and callers waiting for room

    @contextlib.contextmanager
    def lease(self, name: str) -> Iterator[M]:
        model = self.acquire(name)
        try:
            yield model
        finally:
            self.release(name)

    def loaded(self) -> dict[str, M]:
        """The models loaded now (unpinned: tests and listings read them)."""
        with self._changed:
            return {n: e.model for n, e in self._entries.items() if e.state == "loaded" and e.model is not None}

    def states(self) -> list[ModelState]:
        now = time.monotonic()
        with self._changed:
            return [
                ModelState(
                    name=name,
                    state=e.state,
                    bytes=e.bytes if e.state != "unloaded" else 0,
                    pins=e.pins,
                    idle_s=now - e.last_use if e.state == "loaded" and e.pins == 0 else None,
                    keep_alive_s=e.config.keep_alive_s,
                    loads=e.loads,
                    unloads=e.unloads,
                )
                for name, e in self._entries.items()
            ]

    def unload_idle(self, names: list[str] | None = None) -> list[str]:
        """Unload now the idle models among `names` (None: whose keep-alive has passed); returns those unloaded."""
        with self._changed:
            residents = self._residents()
            if names is None:
                chosen = expired(residents, time.monotonic())
            else:
                chosen = [r.name for r in residents if r.idle and r.name in names]
            for name in chosen:
                self._entries[name].state = "unloading"
        self._unload(chosen)
        return chosen

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            reaper = self._reaper
            models = [(n, e.model) for n, e in self._entries.items() if e.state == "loaded" and e.model is not None]
            for name, _ in models:
                entry = self._entries[name]
                entry.model, entry.state, entry.bytes = None, "unloaded", 0
        if reaper is not None:
            reaper.join(timeout=5)
        for _, model in models:
            model.close()

    # --- internals (lock held unless said) -------------------------------------------------------------------
    def _residents(self) -> list[Resident]:
        return [
            Resident(n, e.bytes, e.pins, e.last_use, e.config.keep_alive_s, settled=e.state == "loaded")
            for n, e in self._entries.items()
            if e.state != "unloaded"
        ]

    def _room_for(self, name: str, entry: _Entry[M]) -> list[str] | None:
        """The idle models to unload so that `name` fits ([] without a budget); None: wait. Raises when it could
        never fit."""
        if self.budget_bytes is None:
            return []
        need = entry.estimate or 0
        if need > self.budget_bytes:
            raise EngineError(
                f"model {name!r} needs about {need / MB:.0f} MB, more than the whole `[engine] memory-budget-mb = "
                f"{self.budget_bytes // MB}` (raise it, or lower `models.{name}.context-length` or `slots`)"
            )
        return evictions(self._residents(), need, self.budget_bytes)

    def _timeout_error(self, name: str, entry: _Entry[M]) -> EngineError:
        if entry.state != "unloaded":
            return EngineError(f"model {name!r} is still {entry.state} (waited until the deadline)")
        holders = ", ".join(
            f"{n} ({e.bytes / MB:.0f} MB, " + (f"{e.pins} in use" if e.pins else "kept forever") + ")"
            for n, e in self._entries.items()
            if e.state != "unloaded"
        )
        return EngineError(
            f"model {name!r} (about {(entry.estimate or 0) / MB:.0f} MB) does not fit in `[engine] "
            f"memory-budget-mb = {(self.budget_bytes or 0) // MB}`, held by {holders or 'nothing'}, and none of them "
            "went idle in time (raise the budget, or close the sequences that pin them)"
        )

    def _unload(self, names: list[str]) -> None:
        """Close the models marked "unloading" (lock not held: closing takes each model's lock)."""
        for name in names:
            entry = self._entries[name]
            model = entry.model
            try:
                if model is not None:
                    model.close()
            finally:
                with self._changed:
                    entry.model, entry.state, entry.bytes = None, "unloaded", 0
                    entry.unloads += 1
                    self._on_unloaded(name)
                    self._changed.notify_all()

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="llmhost-model-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        """Unload each idle model when its keep-alive runs out (woken by every release to look again)."""
        while True:
            with self._changed:
                if self._closed:
                    return
                due = expired(self._residents(), time.monotonic())
                if not due:
                    ends = next_expiry(self._residents())
                    self._changed.wait(None if ends is None else max(0.0, ends - time.monotonic()) + 0.001)
                    continue
                for name in due:
                    self._entries[name].state = "unloading"
            self._unload(due)
