"""The build cache's per-entry lock (toolchains.locks): builds of one entry take turns across threads and
processes, and a holder that is killed releases it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from llmhost.toolchains import locks

REPO = Path(__file__).resolve().parents[2]


def test_threads_holding_one_entry_take_turns(tmp_path: Path) -> None:
    entry = tmp_path / "guests" / "abc.wasm"  # neither it nor its folder exists yet
    spans: list[tuple[float, float]] = []

    def hold() -> None:
        with locks.held(entry):
            began = time.monotonic()
            time.sleep(0.2)
            spans.append((began, time.monotonic()))

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans.sort()
    assert len(spans) == 3
    assert all(first[1] <= second[0] for first, second in zip(spans, spans[1:], strict=False)), spans
    with locks.held(tmp_path / "guests" / "other.wasm"), locks.held(entry):  # another entry is another lock
        pass


def test_another_process_holds_it_until_it_is_killed(tmp_path: Path) -> None:
    entry = tmp_path / "abc.wasm"
    script = (
        "import sys, time; from pathlib import Path; from llmhost.toolchains import locks\n"
        f"with locks.held(Path({str(entry)!r})):\n    print('held', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "host")}
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        acquired = threading.Event()

        def take() -> None:
            with locks.held(entry):
                acquired.set()

        taker = threading.Thread(target=take)
        taker.start()
        assert not acquired.wait(0.5)  # waits while the other process builds
        holder.send_signal(signal.SIGKILL)  # a build killed mid-way leaves no stale lock
        assert acquired.wait(10)
        taker.join()
    finally:
        holder.kill()
        holder.wait()
