"""Memory across `--watch` reloads, in a process of its own (tests/integration/test_watch_memory.py runs it):
`python watch_memory_driver.py BASE.wasm WORK RELOADS` prints one JSON line.

An `http-app` component is served by serve's app (`ServeApp`, through `asgi.component_app`, on the fake engine) and
reloaded RELOADS times through `--watch`'s own code path: `Watcher.reload` builds (here: writes the next version),
loads it as serve's `--watch` does (`HttpComponent(host, replace(settings, source=path))`) and swaps it in with
`ServeApp.swap`. Each version is distinct: BASE with a custom section of its own appended, so each has its own cache
key as a rebuild of edited sources has. Compiling 50 guests would take minutes, so the base's compiled code is
compiled once (Winch) and each version's cache entry is a copy of it: a reload then deserializes it, a fresh
~50 MB of code in memory per version, as a compile would make. One request is in flight across the first reloads.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import sys
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from llmhost import FakeEngineConfig, Host, HostConfig
from llmhost.asgi import component_app
from llmhost.runtime.components import ComponentCache, create_wasmtime_engine
from llmhost.serve.component import HttpComponent
from llmhost.shell.watch import Watcher

NAME = "app"
IN_FLIGHT_RELOADS = 3  # reloads while the first version's request runs
IN_FLIGHT_TIMEOUT_S = 60.0
FREED_TIMEOUT_S = 5.0


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def variant(base: bytes, number: int) -> bytes:
    """`base` with a custom section (id 0: a name, then any bytes) appended: valid anywhere in a component."""
    name = b"llmhost-test-version"
    content = leb128(len(name)) + name + str(number).encode()
    return base + b"\x00" + leb128(len(content)) + content


async def gone(refs: list[weakref.ref[HttpComponent]]) -> bool:
    """Whether every one of these components is freed within FREED_TIMEOUT_S (by reference counting alone)."""
    deadline = time.monotonic() + FREED_TIMEOUT_S
    while any(ref() is not None for ref in refs):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def main(base_wasm: Path, work: Path, reloads: int) -> dict[str, Any]:
    gc.disable()  # what is freed must be freed by reference counting: a cycle would wait for a full collection
    source = work / "app.wasm"  # where each "build" writes the next version
    cache_dir = work / "cache"
    base = base_wasm.read_bytes()
    source.write_bytes(variant(base, 0))
    config = HostConfig(engine=FakeEngineConfig(), cache_dir=cache_dir, compile_strategy="fast")
    with Host(config, note=lambda _: None) as host:
        app = component_app(host, source, name=NAME, max_concurrency=4)  # compiles version 0 (Winch)
        settings = app.component.settings
        keys = ComponentCache(create_wasmtime_engine(), cache_dir / "components", note=lambda _: None)
        compiled = keys.cache_file(source.read_bytes(), "winch")
        for number in range(1, reloads + 1):  # each version's cache entry: a copy of version 0's code
            shutil.copyfile(compiled, keys.cache_file(variant(base, number), "winch"))

        def build(name: str) -> Path:
            nonlocal version
            version += 1
            partial = source.with_suffix(".tmp")
            partial.write_bytes(variant(base, version))
            partial.replace(source)
            return source

        version = 0
        load = lambda name, path: HttpComponent(host, replace(settings, source=path))  # noqa: E731  (as serve's)
        watcher = Watcher({NAME: work}, build, load, app.swap, current={NAME: source})
        old: list[weakref.ref[HttpComponent]] = []
        curve: list[int] = []  # RSS after each reload (MB)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            assert (await client.get("/hello")).status_code == 200
            first = rss_mb()
            # A request on version 0 that runs across reloads: it must finish on the version it started on.
            slow = asyncio.ensure_future(client.get("/drip?n=40&ms=50", timeout=IN_FLIGHT_TIMEOUT_S))
            deadline = time.monotonic() + IN_FLIGHT_TIMEOUT_S
            while app.running() == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            during = app.running()
            for number in range(reloads):
                old.append(weakref.ref(app.components[NAME]))
                assert await watcher.reload(NAME, time.time()) is not None, f"reload {number + 1} did not happen"
                if number == 0:
                    running_after_reload = app.running()  # version 0's request, still running on it
                if number + 1 == IN_FLIGHT_RELOADS:
                    in_flight = await slow
                    # Nothing but the request held version 0: it goes once its guest has ended (on its worker
                    # thread, just after the response), with no garbage collection.
                    version0_freed = await gone(old[:1])
                assert (await client.get("/hello")).status_code == 200
                curve.append(round(rss_mb()))
            # Measured once every replaced version is gone: just after a reload, the one replaced may still be
            # finishing its last request on a worker thread (two versions held for a moment is by design).
            replaced_freed = await gone(old)
            last = rss_mb()
        app.close()
    return {
        "first_mb": first,
        "last_mb": last,
        "running_before_reloads": during,
        "running_after_reload": running_after_reload,
        "in_flight_status": in_flight.status_code,
        "in_flight_body": in_flight.text,
        "version0_freed": version0_freed,
        "replaced_freed": replaced_freed,
        "reloads": len(watcher.reloads),
        "curve_mb": curve,
    }


if __name__ == "__main__":
    result = asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(result))
