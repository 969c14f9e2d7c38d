"""`llmhost serve` throughput and latency with a trivial (no-LLM) handler, and the cost of a fresh instance.

Runs the real CLI (`llmhost serve`, fake engine) on loopback and drives it with keep-alive HTTP clients on
threads (the client shares the machine's cores with the server, so the numbers are a floor). Standalone:
`python bench/serve.py` prints the section and replaces it in docs/benchmarks.md; `bench/run.py` appends it.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmhost import FakeEngineConfig, Host, HostConfig
from llmhost.interfaces.http import HTTP_INTERFACE, define_http
from llmhost.run.scope import RunScope
from llmhost.runtime.sandbox import new_store
from llmhost.serve.component import HttpComponent, HttpRequest
from llmhost.serve.config import AppConfig, resolve, single_component
from llmhost.toolchains.python import build_component

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = {1: 300, 16: 800}  # per concurrency level
WARMUP = 100
HEADING = "## Serve"


def start_server(wasm: Path, cache_dir: Path, config: Path | None = None) -> tuple[subprocess.Popen[str], int]:
    """`llmhost serve WASM` on a free loopback port (default config: the fake engine)."""
    if config is None:
        config = Path(tempfile.mkdtemp()) / "bench.toml"
        config.write_text('[engine]\nkind = "fake"\n')
    command = [str(Path(sys.executable).with_name("llmhost")), "serve", str(wasm), "-c", str(config)]
    return launch([*command, "--listen", "127.0.0.1:0"], cache_dir)


def launch(command: list[str], cache_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """Start a `... serve ... --listen 127.0.0.1:0` command; returns the process and the port it listens on."""
    env = dict(os.environ, LLMHOST_CACHE_DIR=str(cache_dir))
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if match:
            # Drain the log on a thread, so a full pipe never blocks the server.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, int(match.group(1))
    raise RuntimeError("llmhost serve did not start")


def drive(port: int, concurrency: int, total: int) -> tuple[float, list[float]]:
    def worker(count: int) -> list[float]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", "/")
            response = connection.getresponse()
            if response.read() != b"ok" or response.status != 200:
                raise RuntimeError(f"unexpected response {response.status}")
            latencies.append(time.perf_counter() - started)
        connection.close()
        return latencies

    shares = [total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = [x for part in pool.map(worker, shares) for x in part]
    return total / (time.perf_counter() - started), latencies


def instance_cost(wasm: Path, cache_dir: Path, n: int = 50) -> tuple[float, float]:
    """p50 of (new store + instantiate) and of a whole in-process `handle` call (fresh instance included)."""
    config = HostConfig(engine=FakeEngineConfig(), cache_dir=cache_dir)
    settings = resolve(single_component(AppConfig(), wasm), "bench").components[wasm.stem]
    with Host(config) as host:
        component = HttpComponent(host, settings)
        linked = host.link(wasm, extra={HTTP_INTERFACE: define_http})
        creates, calls = [], []
        request = HttpRequest("GET", "/", [], b"")
        for _ in range(n):
            started = time.perf_counter()
            scope = RunScope("bench")
            store = new_store(linked.engine, settings.sandbox, [wasm.name], scope=scope)
            linked.linker.instantiate(store, linked.component)
            store.close()
            scope.close()
            creates.append(time.perf_counter() - started)
            started = time.perf_counter()
            component.handle(request, None, 10.0)  # type: ignore[arg-type]
            calls.append(time.perf_counter() - started)
    return statistics.median(creates), statistics.median(calls)


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def serve_section(cache_dir: Path | None = None) -> list[str]:
    cache_dir = cache_dir or HostConfig().cache_dir
    wasm = build_component(ROOT / "bench" / "http_guest", cache_dir / "bench" / "bench-http.wasm", "http-app")
    create, call = instance_cost(wasm, cache_dir)
    process, port = start_server(wasm, cache_dir)
    try:
        drive(port, 16, WARMUP)
        rows = []
        for concurrency, total in REQUESTS.items():
            rate, latencies = drive(port, concurrency, total)
            p50, p95 = p(latencies, 0.5) * 1000, p(latencies, 0.95) * 1000
            rows.append(f"| {concurrency} | {total} | {rate:.0f} | {p50:.1f} | {p95:.1f} |")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    return [
        HEADING,
        "",
        f'`llmhost serve` (fake engine, h11) with a handler that answers "ok" without the LLM; keep-alive clients '
        f"on threads of the same {os.cpu_count()}-core machine, loopback; every request gets a fresh instance. "
        "No model is involved, so these figures do not depend on it (each model's generation through `llmhost "
        "serve` is the last column of Continuous batching).",
        "",
        "| concurrency | requests | requests/s | p50 ms | p95 ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "| per request | p50 |",
        "| --- | ---: |",
        f"| new store + instantiate the component (componentize-py guest, precompiled) | {create * 1000:.2f} ms |",
        f"| whole `handle` call in-process (store, instance, call, response) | {call * 1000:.2f} ms |",
        "",
    ]


def main() -> int:
    lines = serve_section()
    print("\n".join(lines))
    out = ROOT / "docs" / "benchmarks.md"
    text = out.read_text() if out.is_file() else "# Benchmarks\n\n"
    before, _, after = text.partition(HEADING)
    rest = after.split("\n## ", 1)[1] if "\n## " in after else ""
    out.write_text(before.rstrip("\n") + "\n\n" + "\n".join(lines) + ("\n## " + rest if rest else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
