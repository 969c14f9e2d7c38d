"""The background prebuild of a `make test` run (tests/conftest.py's `prebuilt_guests`): every guest of the
repository is built into the shared build cache while the tests run, two at a time, at idle CPU priority, so
that the builds use only the CPU the tests leave idle.

A test that needs a guest does not wait for this: it builds it (the build cache's per-entry lock makes the two
builds one), or finds it built. A build that fails is left to the test that needs it, which reports it.

Usage: python prebuild.py CACHE_DIR OUT_DIR, with the jobs on stdin as JSON: [[source, world, wit], ...]. SIGTERM
stops it: the builds under way end (their temporary files removed) and no other starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmhost import build_component

WORKERS = 2  # two cores


def main() -> None:
    # SCHED_IDLE, which threads and the processes they start inherit: these builds run only on a core nothing else
    # wants, and give it up at once. It works within the tests' session only: Linux first shares the CPU between
    # sessions (autogroups), and a session of its own, even at nice 19, made llama.cpp decode 4-5x slower beside it.
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    cache_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    jobs = json.load(sys.stdin)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # the builds under way get it from the process group

    def build(index: int, source: str, world: str | None, wit: str | None) -> None:
        if stopping.is_set():
            return
        output = out / f"{index}.wasm"  # only the cache's copy is wanted
        with contextlib.suppress(Exception):
            build_component(Path(source), output, world, cache_dir=cache_dir, wit=Path(wit) if wit else None)
        output.unlink(missing_ok=True)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(build, i, *job) for i, job in enumerate(jobs)]:
            future.result()


if __name__ == "__main__":
    main()
