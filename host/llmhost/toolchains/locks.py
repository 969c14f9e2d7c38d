"""One build at a time per cache entry, across threads and processes: two builds of the same sources (two
`llmhost build`s, a `serve --watch` beside a build, a test run's background prebuild) build once; the second waits
for the first and takes its result. The kernel drops the lock of a process that dies, so a killed build leaves no
stale lock."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_SUFFIX = ".lock"


@contextlib.contextmanager
def held(entry: Path) -> Iterator[None]:
    """An exclusive lock on `entry` (a file or folder of the cache, which need not exist yet) for the block."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    # flock locks an open file description: two threads of one process that each open the file exclude each other.
    with open(entry.with_name(entry.name + LOCK_SUFFIX), "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def build_once(entry: Path, build: Callable[[], None]) -> None:
    """Run `build` (which writes `entry`) unless `entry` exists, holding its lock: a build that waited for another
    of the same entry finds it written and builds nothing."""
    if not entry.is_file():
        with held(entry):
            if not entry.is_file():
                build()
