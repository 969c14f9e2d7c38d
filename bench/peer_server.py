"""`llmhost serve` (guest-examples/openai-compat) against llama.cpp's own `llama-server`, one machine, same file.

Both servers load the built-in gemma-3-270m GGUF with the same threads and 8 slots, and take greedy 64-token
`POST /v1/completions` (temperature 0) from 1, 8 and 16 concurrent clients (16: twice the slots, so requests queue
for a slot). Each client sends `REQUESTS_PER_CLIENT` requests one after another; the metric is aggregate completion
tokens/s. Rounds are interleaved (llmhost, llama-server, then the other way round next time) so machine noise hits
both alike; the table reports each server's median and the median of the rounds' llmhost ÷ llama-server ratios.

llama-server is built once from the llama.cpp that our llama-cpp-python sdist vendors, with our wheel's ISA flags
(bench/peer_build.py). Its settings match llmhost's model config: a 4096-token window per slot (`-c` = 8 × 4096),
and no weight repacking (`--no-repack`: llmhost's `exact-batching = true` turns it off; `--repack` runs both with
it, llmhost with `exact-batching = false`). Otherwise each server keeps its defaults (prompt caches on; llama-server
a KV stream per slot, llmhost one unified pool).

Standalone: `python bench/peer_server.py [--rounds N] [--quick]` prints the section and replaces it in
docs/benchmarks.md; `bench/run.py` appends it (`run`).
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bare import MODEL, THREADS
from peer_build import VERSION, llama_server
from sections import replace_section
from serve import completion_tokens, launch

from llmhost import HostConfig
from llmhost.engine.local.models import default_model_path
from llmhost.toolchains.python import build_component

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## `llmhost serve` against llama-server (bench/peer_server.py)"
SLOTS = 8
CONTEXT = 4096  # per slot: llmhost's default context-length
TOKENS = 64
STREAMS = (1, 8, 16)
ROUNDS = 5
# Requests each client sends in a round, one after another: a round lasts a few seconds at every level, and at 16
# streams the queue for a slot stays full (one request each would measure two waves and the gap between them).
REQUESTS_PER_CLIENT = {1: 6, 8: 3, 16: 3}
QUICK_REQUESTS_PER_CLIENT = {1: 2, 8: 1, 16: 1}
# The latency split: one client, `SPLIT_REQUESTS` 1-token and as many TOKENS-token completions per server and round.
# The difference of the medians, over TOKENS - 1, is a decode step's time; the 1-token latency is the request's own
# cost (HTTP, the guest, the prompt). Medians of many short requests: steadier than a throughput ratio at 1 stream.
SPLIT_REQUESTS = 8
SPLIT_ROUNDS = 3
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llmhost(cache_dir: Path, folder: Path, repack: bool) -> tuple[subprocess.Popen[str], int]:
    wasm = build_component(
        ROOT / "guest-examples" / "openai-compat", folder / "openai.wasm", "http-app", cache_dir=cache_dir
    )
    config = folder / "llmhost.toml"
    config.write_text(
        f"[models.{MODEL}]\nslots = {SLOTS}\nthreads = {THREADS}\ncontext-length = {CONTEXT}\n"
        f"exact-batching = {'false' if repack else 'true'}\n"
        "[limits]\ndeadline-s = 600\n"
        f'[components.app]\nsource = "{wasm}"\nallowed-models = ["{MODEL}"]\n[routes]\n"/" = "app"\n'
    )
    command = [str(Path(sys.executable).with_name("llmhost")), "serve", "-c", str(config)]
    return launch([*command, "--listen", "127.0.0.1:0"], cache_dir)


def start_peer(binary: Path, gguf: Path, repack: bool) -> tuple[subprocess.Popen[bytes], int]:
    """llama-server on a free loopback port, once /health answers 200."""
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(THREADS), "-tb", str(THREADS), "-np", str(SLOTS), "-c", str(SLOTS * CONTEXT)]
    command += [] if repack else ["--no-repack"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited with {process.returncode}: {' '.join(command)}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("llama-server did not become healthy")


def drive(port: int, streams: int, per_client: int, tag: str) -> float:
    """Aggregate completion tokens/s of `streams` clients, each sending `per_client` greedy completions in turn."""

    def client(i: int) -> int:
        total = 0
        for k in range(per_client):
            prompt = f"{tag} story {i}.{k}: Once upon a time,"
            body = {"model": MODEL, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0}
            total += completion_tokens(port, body)
        return total

    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        generated = sum(pool.map(client, range(streams)))
    return generated / (time.perf_counter() - started)


def measure(ports: dict[str, int], rounds: int, quick: bool) -> dict[int, dict[str, list[float]]]:
    """tokens/s per stream count and server, each round's servers in alternating order (a warm-up round first)."""
    per_client = QUICK_REQUESTS_PER_CLIENT if quick else REQUESTS_PER_CLIENT
    rates: dict[int, dict[str, list[float]]] = {n: {name: [] for name in ports} for n in STREAMS}
    for r in range(rounds + 1):
        for streams in STREAMS:
            order = list(ports.items())
            for name, port in order if r % 2 else order[::-1]:
                rate = drive(port, streams, per_client[streams] if r else 1, f"r{r}")
                if r:
                    rates[streams][name].append(rate)
                    print(f"round {r}: {streams} streams: {name} {rate:.1f} tok/s", file=sys.stderr)
    return rates


def latency_split(ports: dict[str, int], rounds: int) -> dict[str, tuple[float, float]]:
    """Per server: (median 1-token completion latency, a decode step's time), in ms, interleaved rounds."""
    times: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for r in range(rounds + 1):  # a warm-up round first
        order = list(ports.items())
        for name, port in order if r % 2 else order[::-1]:
            for tokens in (1, TOKENS):
                for k in range(SPLIT_REQUESTS):
                    prompt = f"split r{r} {tokens}.{k}: Once upon a time,"
                    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0}
                    started = time.perf_counter()
                    generated = completion_tokens(port, body)
                    if r:
                        times.setdefault((name, tokens), []).append((time.perf_counter() - started, generated))
    split = {}
    for name in ports:
        one = statistics.median(elapsed for elapsed, _ in times[(name, 1)])
        # Each long request's steps: an early end (fewer tokens) counts as the steps it ran.
        steps = [(elapsed - one) / (n - 1) for elapsed, n in times[(name, TOKENS)] if n > 1]
        split[name] = (1000 * one, 1000 * statistics.median(steps))
    return split


def run(cache_dir: Path | None = None, rounds: int = ROUNDS, quick: bool = False, repack: bool = False) -> list[str]:
    """The section's lines (heading first)."""
    cache_dir = cache_dir or HostConfig().cache_dir
    binary = llama_server()
    gguf = default_model_path(cache_dir)
    folder = Path(tempfile.mkdtemp())
    servers: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
    try:
        llmhost, llmhost_port = start_llmhost(cache_dir, folder, repack)
        servers.append(llmhost)
        peer, peer_port = start_peer(binary, gguf, repack)
        servers.append(peer)
        ports = {"llmhost": llmhost_port, "llama-server": peer_port}
        rates = measure(ports, rounds, quick)
        split = latency_split(ports, 1 if quick else SPLIT_ROUNDS)
    finally:
        for process in servers:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    rows = []
    for streams, by_server in rates.items():
        ours, theirs = by_server["llmhost"], by_server["llama-server"]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        rows.append(
            f"| {streams} | {statistics.median(ours):.1f} | {statistics.median(theirs):.1f} | "
            f"**{statistics.median(ratios):.3f}** | {min(ratios):.3f}–{max(ratios):.3f} |"
        )
    per_client = QUICK_REQUESTS_PER_CLIENT if quick else REQUESTS_PER_CLIENT
    repacking = (
        "weight repacking on in both (llmhost `exact-batching = false`)"
        if repack
        else "no weight repacking in either (llmhost's `exact-batching = true`; llama-server `--no-repack`)"
    )
    return [
        HEADING,
        "",
        f"`llmhost serve` running guest-examples/openai-compat against llama.cpp's own `llama-server` (built from the "
        f"llama.cpp that llama-cpp-python {VERSION} vendors, with our wheel's ISA flags), side by side on this "
        f"{os.cpu_count()}-core machine: the built-in {MODEL} file, {THREADS} threads, {SLOTS} slots of {CONTEXT} "
        f"tokens, {repacking}. Greedy {TOKENS}-token `POST /v1/completions` (temperature 0); each client sends "
        f"{', '.join(f'{per_client[n]} ({n} streams)' for n in STREAMS)} requests in turn; 16 streams is twice the "
        f"slots, so requests queue for a slot. Aggregate completion tokens/s, medians of {rounds} interleaved rounds "
        "after a warm-up round; the ratio is the median of the rounds' llmhost ÷ llama-server.",
        "",
        "| streams | llmhost tok/s | llama-server tok/s | llmhost ÷ llama-server | rounds' range |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"One stream, split (one client; {SPLIT_REQUESTS} requests of 1 and of {TOKENS} tokens per server in each of "
        f"{1 if quick else SPLIT_ROUNDS} interleaved rounds; medians): a request's own latency (a 1-token "
        f"completion: HTTP, the guest or the server's handler, a short prompt) and a decode step's time "
        f"(({TOKENS}-token latency − 1-token latency) ÷ {TOKENS - 1}).",
        "",
        "| server | 1-token completion, ms | decode step, ms |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {one:.1f} | {step:.2f} |" for name, (one, step) in split.items()),
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--quick", action="store_true", help="fewer requests per client (a rough ratio in ~1 min)")
    parser.add_argument("--repack", action="store_true", help="both with llama.cpp's weight repacking on")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave docs/benchmarks.md alone")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `finally` stops both servers (a `timeout` run too)
    lines = run(rounds=args.rounds, quick=args.quick, repack=args.repack)
    print("\n".join(lines))
    if not args.no_write:
        replace_section(HEADING, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
