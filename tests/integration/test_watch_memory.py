"""`--watch` is bounded (issue 66, part 3): the compiled code of a replaced component was kept for the process's life
(`ComponentCache._loaded`, ~10-50 MB a reload). tests/watch_memory_driver.py reloads an `http-app` component 50 times
through `--watch`'s own code path (`Watcher.reload`, serve's `HttpComponent` load and `ServeApp.swap`), each version
distinct, in a process of its own whose RSS is measured; a request runs on the first version across the first
reloads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wasm
DRIVER = Path(__file__).resolve().parents[1] / "watch_memory_driver.py"
RELOADS = 50
MAX_GROWTH_MB = 100  # the bound: memory after 50 distinct reloads within 100 MB of the first
DRIVER_TIMEOUT_S = 300


def test_fifty_reloads_free_each_replaced_version_once_its_last_request_ends(
    http_wasm: dict[str, Path], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(http_wasm["http_probe"]), str(tmp_path), str(RELOADS)],
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["reloads"] == RELOADS
    # The request on version 0 ran across a reload and finished there, whole.
    assert got["running_before_reloads"] == got["running_after_reload"] == 1
    assert got["in_flight_status"] == 200 and got["in_flight_body"].endswith("tick 39\nend\n")
    # Freed by reference counting alone (the driver turns the garbage collector off): version 0 once its request
    # ended, and every replaced version by the end.
    assert got["version0_freed"] and got["replaced_freed"]
    assert got["last_mb"] - got["first_mb"] < MAX_GROWTH_MB, (got["first_mb"], got["last_mb"], got["curve_mb"])
