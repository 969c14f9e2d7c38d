"""One thread in the process makes every llama.cpp graph computation (`llama_decode`), whichever thread asks.

Why: llama-cpp-python builds llama.cpp with OpenMP. Each thread that calls `llama_decode` gets an OpenMP team of
its own, which lives as long as that thread. Once the teams hold more threads than there are CPUs, libgomp
shortens the spin of every barrier, and a graph has hundreds: its threads sleep and wake at each one. Measured on
2 cores with SmolLM2: a one-token decode took 8.5 ms from one thread, 12-22 ms while a second calling thread
merely existed. The scheduler runs steps on whichever reader needs them, and appends, scores and embeddings run
on the request's thread, so without this every model would pay that. A hand-off costs about 14 µs here (two plain
locks; a ThreadPoolExecutor future cost 21 µs). `start` lets the scheduler work on while a decode runs (`run` is
`start` and wait at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _ComputeThread:
    """One daemon thread and a one-call mailbox. Callers take turns (`_turn`); each hand-off is two releases of
    plain locks, which wake the other side directly: a `ThreadPoolExecutor` future costs twice as much per call
    (its queue, condition variables and waiter lists), and at GPU speed every decode step pays it (bench/gpu_speed.py).
    """

    def __init__(self) -> None:
        self._turn = threading.Lock()
        self._go = threading.Lock()
        self._done = threading.Lock()
        # Released once per call: when the call makes its own first compute call (the C call, which releases the
        # GIL), or when it ends. A caller that works on meanwhile waits for it first: until then the compute
        # thread needs the GIL to get to its C call, and a caller busy in Python holds it (for up to the switch
        # interval, 5 ms): the work would not overlap the decode but delay it.
        self._launched = threading.Lock()
        self._launched_now = False
        self._go.acquire()
        self._done.acquire()
        self._launched.acquire()
        self._call: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self.ident: int | None = None
        thread = threading.Thread(target=self._serve, name="llmhost-compute", daemon=True)
        thread.start()

    def _serve(self) -> None:
        self.ident = threading.get_ident()
        while True:
            self._go.acquire()
            assert self._call is not None
            fn, args = self._call
            try:
                self._result = fn(*args)
            except BaseException as error:  # handed back to the caller, which raises it
                self._error = error
            self.launched()
            self._done.release()

    def launched(self) -> None:
        """The current call has got to its C call (or ended): a caller waiting in `start` may go on."""
        if not self._launched_now:
            self._launched_now = True
            self._launched.release()

    def start(self, fn: Callable[..., Any], args: tuple[Any, ...], overlap: bool) -> Callable[[], Any]:
        """Hand `fn(*args)` over; the returned `wait()` gives its result (or raises its exception). With `overlap`
        return once the call is under way in C (see `_launched`), else at once. Other callers wait for their
        turn until `wait()`: call it exactly once, and make no other compute call before it."""
        self._turn.acquire()
        self._call = (fn, args)
        self._launched_now = False
        self._go.release()
        if overlap:
            self._launched.acquire()

        def wait() -> Any:
            self._done.acquire()
            if not overlap:  # released before `_done`: this never blocks (no wake-up in the middle of the call)
                self._launched.acquire()
            result, error = self._result, self._error
            self._call = self._result = self._error = None
            self._turn.release()
            if error is not None:
                raise error
            return result

        return wait


_thread: _ComputeThread | None = None
_lock = threading.Lock()


def _compute_thread() -> _ComputeThread:
    global _thread
    thread = _thread
    if thread is None:
        with _lock:
            if _thread is None:
                _thread = _ComputeThread()
            thread = _thread
    return thread


def start(fn: Callable[..., T], *args: object, overlap: bool = True) -> Callable[[], T]:
    """Start `fn(*args)` on the compute thread (started on first use) and return its `wait()`: the caller works on
    while it runs (the scheduler's bookkeeping during a decode), from when `fn` has reached its own first compute
    call (`llama_decode`, in C) or ended. `wait()` must be called once, before any other compute call of the
    caller's."""
    thread = _compute_thread()
    if threading.get_ident() == thread.ident:  # already there (a call made by a call it runs): run it now
        thread.launched()
        value = fn(*args)
        return lambda: value
    return thread.start(fn, args, overlap)


def run(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on the compute thread; its result, or its exception re-raised here."""
    return start(fn, *args, overlap=False)()
