"""A build's progress where nobody watches a terminal: a line when a long step starts and one every HEARTBEAT_S
seconds until it ends, so that a log (a first `llmhost serve` under a supervisor, a CI job) does not sit silent for
the 10-20 s of a componentize-py build or a dependency install.

The CLI prints every note on a terminal and, elsewhere, only `Milestone` notes (these).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

HEARTBEAT_S = 10.0  # seconds between two "still ..." lines


class Milestone(str):
    """A note worth a line in a log too: a long step's start, and its heartbeat."""


@contextlib.contextmanager
def heartbeat(note: Callable[[str], None] | None, doing: str) -> Iterator[None]:
    """Say `doing` now, then "still `doing` (N s)" every HEARTBEAT_S seconds until the block ends (from a thread of
    its own: `note` must take calls from another thread)."""
    if note is None:
        yield
        return
    note(Milestone(f"{doing} …"))
    started, done = time.monotonic(), threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            note(Milestone(f"still {doing} ({time.monotonic() - started:.0f} s)"))

    thread = threading.Thread(target=beat, name="llmhost-build-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
