"""The background prebuild of a `make test` run (tests/conftest.py's `prebuilt_guests`): every guest of the
repository is built into the shared build cache, and compiled into its component cache, while the tests run, two
at a time, at idle CPU priority, so that the builds use only the CPU the tests leave idle.

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

from llmhost import FakeEngineConfig, Host, HostConfig, build_component

WORKERS = 2  # two cores: componentize-py and componentize-js use one each


def main() -> None:
    # Linux shares the CPU fairly between sessions (autogroups) first, then between the tasks of each: a session of
    # idle-priority builds would still take half the CPU from a busy test session (builds twice as slow, measured).
    # Its autogroup at nice 19 yields to every other session; SCHED_IDLE, which threads and the processes they start
    # inherit, yields within it. Without autogroups (a kernel without them, a cgroup of its own), SCHED_IDLE alone.
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    cache_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    jobs = json.load(sys.stdin)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # the builds under way get it from the process group

    def build(index: int, source: str, world: str | None, wit: str | None) -> None:
        if stopping.is_set():
            return
        output = out / f"{index}.wasm"  # only the caches' copies are wanted
        with contextlib.suppress(Exception):
            build_component(Path(source), output, world, cache_dir=cache_dir, wit=Path(wit) if wit else None)
            # Compiled too, into the component cache, as the tests' hosts compile it ($LLMHOST_COMPILE_STRATEGY,
            # which conftest.py sets): a host of its own per guest, so that no compiled code stays in memory.
            with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=cache_dir), note=lambda _: None) as host:
                host.load(output)
        output.unlink(missing_ok=True)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(build, i, *job) for i, job in enumerate(jobs)]:
            future.result()


if __name__ == "__main__":
    main()
