"""Run scopes: everything one guest run or request opens is owned by its scope and closed with it.

A `RunScope` is the data of the run's wasmtime `Store` (as Spin keeps per-instance state in its store), so
every host function finds it from the store it is called with, and nothing a guest opens outlives its run:
when the run ends — normally, by trap, by deadline or by a disconnected client — `close()` cancels its
streams and closes its sequences (freeing their slots and saved KV state) at once, whatever handles the
guest kept in globals or lost in an exception's reference cycle.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from wasmtime import _ffi as ffi
from wasmtime import _value

from ..types import EngineError, InvalidInput

T = TypeVar("T")


class HandleTable(Generic[T]):
    """Objects a guest holds, by the integer handle (`rep`) the guest sees. One type for streams, sequences
    and writers. `limit`/`limit_key`: how many may be open at once, and the config key that raises it."""

    def __init__(self, what: str, limit: int | None = None, limit_key: str = "") -> None:
        self._what = what
        self._limit = limit
        self._limit_key = limit_key
        self._items: dict[int, T] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def check_room(self) -> None:
        """Raise `InvalidInput` naming the quota key when no further handle may be opened."""
        with self._lock:
            full = self._limit is not None and len(self._items) >= self._limit
        if full:
            raise InvalidInput(
                f"this run already holds {self._limit} open {self._what}s, its limit (drop some first, or raise "
                f"`{self._limit_key}` in the config)"
            )

    def add(self, item: T) -> int:
        with self._lock:
            rep = next(self._ids)
            self._items[rep] = item
            return rep

    def get(self, rep: int) -> T:
        with self._lock:
            item = self._items.get(rep)
        if item is None:
            raise EngineError(f"this {self._what} was already dropped")
        return item

    def pop(self, rep: int) -> T | None:
        with self._lock:
            return self._items.pop(rep, None)

    def drain(self) -> list[T]:
        """Remove and return every item (the owner then closes them)."""
        with self._lock:
            items, self._items = list(self._items.values()), {}
        return items

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())


class RunScope:
    """One run's or request's open handles, and the hooks run when it ends.

    The streams and sequences tables are created by the interfaces that use them (`tables`), so this module
    knows nothing about what they hold; `close()` closes each table once, idempotently.
    """

    def __init__(self, name: str = "run") -> None:
        self.name = name
        self._tables: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.closed = False

    def table(self, key: str, create: Callable[[], Any], close: Callable[[Any], None], *, first: bool = False) -> Any:
        """The scope's table `key`, created on first use; `close(table)` runs when the scope closes, tables
        marked `first` before the others (streams before the sequences they generate on)."""
        with self._lock:
            if self.closed:
                raise EngineError(f"the {self.name} has ended")
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = create()
                closer = lambda: close(table)  # noqa: E731
                if first:
                    self._closers.insert(0, closer)
                else:
                    self._closers.append(closer)
            return table

    def close(self) -> None:
        """Close everything the run still holds (idempotent). Never raises."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            closers, self._closers = self._closers, []
        for closer in closers:
            try:
                closer()
            except Exception:  # one failing close must not keep the others open
                import logging

                logging.getLogger(__name__).exception("closing a run's handles failed")


def scope_of(store: Any) -> RunScope:
    """The `RunScope` a store was created with (host functions get the store's context as `store`)."""
    data = ffi.wasmtime_context_get_data(store._context())
    scope = _value._unintern(data) if data else None  # type: ignore[arg-type]  # as wasmtime-py's Store.data
    if not isinstance(scope, RunScope):
        raise EngineError("this store has no run scope (create stores with runtime.sandbox.new_store)")
    return scope
