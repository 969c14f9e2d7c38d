"""One thread in the process makes every llama.cpp graph computation (`llama_decode`), whichever thread asks.

Why: llama-cpp-python builds llama.cpp with OpenMP. Each thread that calls `llama_decode` gets an OpenMP team of
its own, which lives as long as that thread. Once the teams hold more threads than there are CPUs, libgomp
shortens the spin of every barrier, and a graph has hundreds: its threads sleep and wake at each one. Measured on
2 cores with SmolLM2: a one-token decode took 8.5 ms from one thread, 12-22 ms while a second calling thread
merely existed. The scheduler runs steps on whichever reader needs them, and appends, scores and embeddings run
on the request's thread, so without this every model would pay that. The hand-off costs tens of microseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_ident: int | None = None


def _mark() -> None:
    global _ident
    _ident = threading.get_ident()


def run(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on the compute thread (started on first use); its result, or its exception re-raised here."""
    global _executor
    if threading.get_ident() == _ident:  # already there (never nested today; cheap to allow)
        return fn(*args)
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmhost-compute", initializer=_mark)
        executor = _executor
    return executor.submit(fn, *args).result()
