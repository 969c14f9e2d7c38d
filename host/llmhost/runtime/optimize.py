"""`python -m llmhost.runtime.optimize WASM CACHE_FILE LOCK`: compile WASM with Cranelift into CACHE_FILE.

Started in the background by `components.start_optimizing` after a fast (Winch) first compile; removes LOCK
when done, whether it succeeded or not. It runs at idle priority: the optimized code only saves time on later
runs, so it must never take a core from the model or the guests running now.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from wasmtime.component import Component

from llmhost.runtime.components import create_wasmtime_engine, store_file

# Where SCHED_IDLE is missing (macOS), the lowest nice value instead.
LOWEST_NICE = 19


def lower_priority() -> None:
    """Idle priority for this process and every thread it starts after (Cranelift's compile threads inherit it);
    and deaf to the terminal's Ctrl-C and hangup, which are for the run that started it."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(LOWEST_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    wasm, cache_file, lock = Path(argv[0]), Path(argv[1]), Path(argv[2])
    try:
        lower_priority()  # before the engine exists: its compile threads start at the first compile
        data = wasm.read_bytes()
        component = Component(create_wasmtime_engine("cranelift"), data)
        store_file(cache_file, bytes(component.serialize()))
        return 0
    finally:
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
