"""Outbound HTTP's costs (part of `make bench`): host memory while large bodies go into guests, and a small GET.

- Peak RSS of `llmhost serve` above its idle level while N requests at once (1, 4, 8, 16) each make an http-app
  guest fetch a 10 MiB body from a server on loopback, under default limits: through the SDK on today's WIT (0.2.4:
  `send-streamed`, read in 1 MiB chunks) and the same guest built against 0.2.3 (whole-body `send`, held to the
  host's `transfer-memory-mb` budget). Each measurement is a fresh server process (VmHWM minus VmRSS when idle).
  Meanwhile a small request to the same server every 100 ms: its slowest answer shows the host answers throughout.
- A small GET from a guest on a kept-alive connection (the `many` op of tests/guests/outbound_probe, 90 GETs, minus
  a run of none), per GET.

Standalone: `python bench/outbound.py` prints the section and replaces it in docs/benchmarks.md.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from sections import replace_section  # noqa: E402

from llmhost import FakeEngineConfig, Host, HostConfig  # noqa: E402
from llmhost.grants.transfers import default_transfer_memory_mb  # noqa: E402
from llmhost.toolchains import build_component  # noqa: E402
from probe_driver import run_probe  # noqa: E402
from serve_driver import serving  # noqa: E402

HEADING = "## Outbound HTTP: host memory and a small GET (bench/outbound.py)"
BODY_BYTES = 10 * 1024 * 1024
CONCURRENCY = (1, 4, 8, 16)
BUILDS = {"SDK, 0.2.4 (send-streamed, 1 MiB reads)": None, "same guest built against 0.2.3 (whole body)": "0.2.3"}
GETS = 90  # within a run's default max-outbound-requests (100)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b"x" * BODY_BYTES

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm and the client's delayed ACK hold
        # the second one for ~40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:  # noqa: N802
        body = self.body if self.path.startswith("/big") else b"ok"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _get(port: int, path: str, timeout: float = 120) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def peak_above_idle(app: Path, port: int, n: int, cache_dir: Path, work: Path) -> tuple[float, str, float]:
    """(peak RSS above idle in MB, requests answered 200 with the whole body, slowest small answer in s)."""
    config = work / f"serve-{n}.toml"
    config.write_text(
        f'[engine]\nkind = "fake"\n\n[components.app]\nsource = "{app}"\n'
        f'allowed-outbound-hosts = ["http://127.0.0.1:{port}"]\nconfig = {{ MODE = "bench" }}\n\n'
        '[routes]\n"/" = "app"\n'
    )
    spec = quote(json.dumps({"url": f"http://127.0.0.1:{port}/big"}))
    with serving(["-c", str(config)], cache_dir) as server:
        _get(server.port, "/config?name=MODE")  # one instance made: the idle level includes it
        idle = _status_kb(server.process.pid, "VmRSS")
        done = threading.Event()
        slowest = [0.0]

        def probe() -> None:
            while not done.is_set():
                start = time.monotonic()
                _get(server.port, "/config?name=MODE")
                slowest[0] = max(slowest[0], time.monotonic() - start)
                time.sleep(0.1)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        with ThreadPoolExecutor(max_workers=n) as pool:
            answers = list(pool.map(lambda _: _get(server.port, f"/fetch?spec={spec}"), range(n)))
        done.set()
        prober.join()
        peak = _status_kb(server.process.pid, "VmHWM")
    outcomes = [_outcome(status, body) for status, body in answers]
    whole = outcomes.count("whole")
    others = sorted({o for o in outcomes if o != "whole"})
    summary = f"{whole}/{n}" + (f" ({', '.join(f'{outcomes.count(o)} {o}' for o in others)})" if others else "")
    return (peak - idle) / 1024, summary, slowest[0]


def _outcome(status: int, body: bytes) -> str:
    """ "whole", or what came back instead: the guest's error kind, or the HTTP status."""
    if status != 200:
        return f"HTTP {status}"
    answer = json.loads(body)
    if answer.get("ok", {}).get("len") == BODY_BYTES:
        return "whole"
    return str(answer.get("err", {}).get("kind", "short"))


def small_get_ms(cache_dir: Path, port: int, work: Path) -> float:
    wasm = build_component(ROOT / "tests" / "guests" / "outbound_probe", work / "probe.wasm", cache_dir=cache_dir)
    config = HostConfig(engine=FakeEngineConfig(), cache_dir=cache_dir, compile_strategy="optimized")
    with Host(config) as host:  # Cranelift code, as a guest runs once its component is compiled
        app = host.load(wasm, allowed_outbound_hosts=[f"http://127.0.0.1:{port}"])
        url = f"http://127.0.0.1:{port}/small"
        run_probe(app, "many", url, "5")  # warm: instance code, a kept-alive connection
        times = []
        for _ in range(3):
            start = time.perf_counter()
            run_probe(app, "many", url, "0")
            empty = time.perf_counter() - start
            start = time.perf_counter()
            outcome = run_probe(app, "many", url, str(GETS))
            assert outcome.value == [200] * GETS, outcome
            times.append((time.perf_counter() - start - empty) / GETS)
        return statistics.median(times) * 1000


def run(cache_dir: Path) -> list[str]:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix="llmhost-bench-outbound-") as tmp, upstream() as port:
        work = Path(tmp)
        for label, version in BUILDS.items():
            wit = None if version is None else ROOT / "wit" / version
            app = build_component(
                ROOT / "tests" / "guests" / "outbound_app", work / f"app-{version}.wasm", "http-app",
                cache_dir=cache_dir, wit=wit,
            )  # fmt: skip
            for n in CONCURRENCY:
                peak_mb, whole, slowest = peak_above_idle(app, port, n, cache_dir, work)
                rows.append(f"| {label} | {n} | {peak_mb:,.0f} MB | {whole} | {slowest * 1000:,.0f} ms |")
                print(rows[-1], file=sys.stderr, flush=True)
        get_ms = small_get_ms(cache_dir, port, work)
    return [
        HEADING,
        "",
        f"N requests at once to `llmhost serve` (default limits: `transfer-memory-mb` = "
        f"{default_transfer_memory_mb()} MB on this machine), each making the http-app guest fetch a 10 MiB body from "
        "a server on loopback. Peak RSS above the idle server (VmHWM − VmRSS, a fresh server per row); whole: "
        "requests answered with every byte; slowest small answer: a `/config` request every 100 ms meanwhile.",
        "",
        "| guest | N | peak RSS above idle | whole | slowest small answer |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"A small GET from a guest on a kept-alive connection ({GETS} GETs in a run, minus an empty run; median of 3): "
        f"{get_ms:.2f} ms (each component has its own connection pool and no cookie jar).",
        "",
    ]


def main() -> int:
    lines = run(HostConfig().cache_dir)
    print("\n".join(lines))
    replace_section(HEADING, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
