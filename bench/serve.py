"""`llmhost serve` throughput and latency with a trivial (no-LLM) handler, and the cost of a fresh instance.

Runs the real CLI (`llmhost serve`, fake engine) on loopback and drives it with keep-alive HTTP clients on
threads (the client shares the machine's cores with the server, so the numbers are a floor). Standalone:
`python bench/serve.py` prints the section and replaces it in docs/benchmarks.md; `bench/run.py` appends it.
"""

from __future__ import annotations

import http.client
import json
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
from llmhost.shell.config import AppConfig, resolve, single_component
from llmhost.toolchains.python import build_component

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = {1: 300, 16: 800}  # per concurrency level
WARMUP = 100
HEADING = "## Serve"
# Metrics on against off (`metrics-listen`): rounds, interleaved, of this many requests each (trivial handler,
# concurrency 16) and of this many concurrent completions of `METRICS_TOKENS` tokens each (the real model).
METRICS_ROUNDS = 8
METRICS_REQUESTS = 400
METRICS_STREAMS = 4
METRICS_TOKENS = 48


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


def scrape(port: int) -> None:
    """GET /metrics once (the metrics listener's port), as Prometheus does every scrape interval."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    connection.getresponse().read()
    connection.close()


def start_with_metrics(command: list[str], cache_dir: Path) -> tuple[subprocess.Popen[str], int, int]:
    """`launch`, also reading the metrics listener's port from the log (the config sets `metrics-listen`)."""
    env = dict(os.environ, LLMHOST_CACHE_DIR=str(cache_dir))
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    metrics_port = 0
    for line in process.stderr:
        found = re.search(r"metrics on http://[\d.]+:(\d+)", line)
        if found:
            metrics_port = int(found.group(1))
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if match:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, int(match.group(1)), metrics_port
    raise RuntimeError("llmhost serve did not start")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def completions(port: int, streams: int, tokens: int, tag: str) -> tuple[float, int]:
    """Aggregate tokens/s of `streams` concurrent greedy `/v1/completions` of `tokens` tokens (openai-compat), and
    the tokens generated."""

    def one(i: int) -> int:
        body = {"model": "gemma-3-270m", "prompt": f"{tag} story {i}:", "max_tokens": tokens, "temperature": 0}
        return completion_tokens(port, body)

    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        generated = sum(pool.map(one, range(streams)))
    return generated / (time.perf_counter() - started), generated


def metrics_work(n: int = 100_000) -> tuple[float, float]:
    """µs of metrics work per request (a counter and a histogram) and per generation (its first token, admission
    wait and usage), in-process: what the on ÷ off ratios cannot resolve on a busy machine."""
    from llmhost.shell.metrics import ServeMetrics

    metrics = ServeMetrics(["app"], ["gemma-3-270m"])
    model = metrics.observer("gemma-3-270m")
    started = time.perf_counter()
    for _ in range(n):
        metrics.request("app", 200, 0.004)
    request = (time.perf_counter() - started) / n
    started = time.perf_counter()
    for _ in range(n):
        model.admission_wait(0.001)
        model.first_token(0.05)
        model.generation_done(20, 48)
    return request * 1e6, (time.perf_counter() - started) / n * 1e6


def metrics_cost(wasm: Path, cache_dir: Path) -> list[str]:
    """Requests/s (trivial handler, fake engine) and tokens/s (openai-compat, the real model) with `metrics-listen`
    on against off: both servers run side by side, measured in interleaved rounds (a scrape per round on the one
    with metrics); the ratio of the medians, of throughput and of the server's CPU time per request or token (which
    other load on the machine disturbs less than the wall clock)."""
    folder = Path(tempfile.mkdtemp())
    exe = str(Path(sys.executable).with_name("llmhost"))
    openai = build_component(
        ROOT / "guest-examples" / "openai-compat", folder / "openai.wasm", "http-app", cache_dir=cache_dir
    )
    rows = []
    for what, source, engine in (
        ("requests/s, trivial handler, concurrency 16 (fake engine)", wasm, '[engine]\nkind = "fake"\n'),
        (
            f"tokens/s, {METRICS_STREAMS} concurrent completions of {METRICS_TOKENS} tokens (gemma-3-270m)",
            openai,
            f"[models.gemma-3-270m]\nslots = {METRICS_STREAMS}\nprefix-cache = false\n[limits]\ndeadline-s = 600\n",
        ),
    ):
        servers = {}
        for name, listen in (("off", ""), ("on", 'metrics-listen = "127.0.0.1:0"\n')):
            config = folder / f"{name}.toml"
            # One component that may use the one model, so that both servers load the same (metrics on loads the
            # models routes need before it is ready; off loads them on first use, in the warm-up round).
            app = f'[components.app]\nsource = "{source}"\nallowed-models = ["gemma-3-270m"]\n[routes]\n"/" = "app"\n'
            config.write_text(listen + engine + app)
            command = [exe, "serve", "-c", str(config), "--listen", "127.0.0.1:0"]
            servers[name] = start_with_metrics(command, cache_dir)
        try:
            results: dict[str, list[float]] = {"off": [], "on": []}
            cpu: dict[str, list[float]] = {"off": [], "on": []}
            for r in range(METRICS_ROUNDS + 1):  # the first round warms up (model pages, instances)
                order = list(servers.items())
                for name, (process, port, metrics_port) in order if r % 2 else order[::-1]:  # each first in turn
                    before = cpu_seconds(process.pid)
                    if source == wasm:
                        rate, units = drive(port, 16, METRICS_REQUESTS)[0], METRICS_REQUESTS
                    else:
                        rate, units = completions(port, METRICS_STREAMS, METRICS_TOKENS, f"r{r}")
                    if metrics_port:
                        scrape(metrics_port)
                    if r:
                        results[name].append(rate)
                        cpu[name].append((cpu_seconds(process.pid) - before) * 1000 / units)
        finally:
            for process, _, _ in servers.values():
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        off, on = statistics.median(results["off"]), statistics.median(results["on"])
        cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        cpu_ratio = cpu_on / cpu_off
        rows.append(
            f"| {what} | {off:.1f} | {on:.1f} | {on / off:.3f} | {cpu_off:.2f} | {cpu_on:.2f} | {cpu_ratio:.3f} |"
        )
    return rows


def completion_tokens(port: int, body: dict[str, object]) -> int:
    """POST `body` to openai-compat's /v1/completions on loopback `port`; the completion's token count."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"/v1/completions answered {response.status}: {raw.decode(errors='replace')}")
    return int(json.loads(raw)["usage"]["completion_tokens"])


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
    cost = metrics_cost(wasm, cache_dir)
    per_request, per_generation = metrics_work()
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
        f"Metrics (`metrics-listen`) on against off: two servers side by side, {METRICS_ROUNDS} interleaved rounds "
        "(after one warm-up round, each server first in every other round), one scrape of /metrics per round; "
        "medians. The target: throughput on ÷ off ≥ 0.98 (the server's CPU time per request or token ≤ 1.02×).",
        "",
        "| throughput | metrics off | metrics on | on ÷ off | server CPU ms per unit, off | on | on ÷ off |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *cost,
        "",
        f"The metrics' own work, in-process: {per_request:.1f} µs per request, {per_generation:.1f} µs per generation, "
        "nothing per token or per decode step (the gauges and step counters are read when scraped).",
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
