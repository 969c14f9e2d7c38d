"""Deterministic mode (part of `make bench`): what `deterministic = true` costs, per built-in model. Aggregate
tokens/s of seeded temperature-1 streams at 1 and 8 concurrent streams, and the time to the first token of a
request whose long prompt is mostly cached (warm prefix), each deterministic ÷ default. The two configurations
are loaded side by side and interleaved round by round, so machine noise hits both alike."""

from __future__ import annotations

import statistics
import sys
import threading
import time

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.domain.limits import DETERMINISTIC_CHUNK, GENERATIVE_MODELS

LEVELS = (1, 8)
ROUNDS = 3
TOKENS = 64
SEEDED = InferencingParams(max_tokens=TOKENS, temperature=1.0, seed=42)
FIRST = InferencingParams(max_tokens=1, temperature=1.0, seed=42)
PREAMBLE = " ".join(f"Rule {i}: answer briefly, in plain words, and name one example of item {i}." for i in range(14))


def streams(host: Host, model: str, n: int, tag: str) -> float:
    """Aggregate generated tokens/s of n concurrent seeded streams."""
    counts: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        prompt = f"{tag} {i}: Once upon a time, in a town by the sea number {i}, there lived"
        done = [e for e in host.infer_stream(model, prompt, SEEDED) if not isinstance(e, StreamChunk)]
        with lock:
            counts.append(done[0].usage.generated_token_count)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def warm_first_token(host: Host, model: str, tag: str) -> float:
    """Seconds to the first token of a question after a long cached preamble (the preamble was just run)."""
    host.infer(model, f"{PREAMBLE}\nQuestion {tag}a: what is item 3?", FIRST)
    start = time.perf_counter()
    for event in host.infer_stream(model, f"{PREAMBLE}\nQuestion {tag}b: what is item 5?", FIRST):
        if isinstance(event, StreamChunk):
            return time.perf_counter() - start
    return time.perf_counter() - start


def run(config: HostConfig, threads: int, n_gpu_layers: int) -> list[str]:
    lines = [
        f"Seeded temperature-1 streams of {TOKENS} tokens through the engine (Python API; slots 8, context 1024 per "
        "slot, prefix cache on); the default and the deterministic configuration loaded side by side, interleaved "
        f"{ROUNDS} rounds, medians. Warm TTFT: a {len(PREAMBLE.split())}-word preamble just run, then a new "
        f"question after it (deterministic mode reuses the cache in whole {DETERMINISTIC_CHUNK}-token chunks).",
        "",
        "| model | measure | default | deterministic | deterministic ÷ default | target |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for model in GENERATIVE_MODELS:
        hosts = {}
        for det in (False, True):
            cfg = ModelConfig(
                slots=max(LEVELS), context_length=1024, threads=threads, n_gpu_layers=n_gpu_layers, deterministic=det
            )
            hosts[det] = Host(config.model_copy(update={"models": {model: cfg}}))
        rates: dict[tuple[bool, int], list[float]] = {}
        firsts: dict[bool, list[float]] = {False: [], True: []}
        for det, host in hosts.items():  # warm-up: buffers, and the first prompt's allocations
            streams(host, model, 2, f"warm{det}")
        for r in range(ROUNDS):
            for n in LEVELS:
                for det, host in hosts.items():
                    rates.setdefault((det, n), []).append(streams(host, model, n, f"R{r}{n}{det}"))
            for det, host in hosts.items():
                firsts[det].append(warm_first_token(host, model, f"{r}{det}"))
            print(f"deterministic bench {model} round {r + 1}: {rates}", file=sys.stderr)
        for host in hosts.values():
            host.close()
        for n in LEVELS:
            default_rate, det_rate = statistics.median(rates[(False, n)]), statistics.median(rates[(True, n)])
            target = "≥ 0.7" if n == max(LEVELS) else ""
            label = f"{n} stream{'s' if n > 1 else ''}, tok/s"
            lines.append(
                f"| {model} | {label} | {default_rate:.1f} | {det_rate:.1f} | **{det_rate / default_rate:.2f}** | "
                f"{target} |"
            )
        default_first, det_first = statistics.median(firsts[False]), statistics.median(firsts[True])
        lines.append(
            f"| {model} | time to first token, warm prefix | {default_first * 1000:.0f} ms | "
            f"{det_first * 1000:.0f} ms | **{det_first / default_first:.2f}** | |"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(run(HostConfig(), 2, 0)))
