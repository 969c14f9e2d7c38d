"""The asyncio API against the sync one (part of `make bench`): N streams on one event loop (`AsyncHost`) against
N threads reading the sync API's streams, on one model.

- Aggregate tokens/s of each (every stream runs to its token budget: end-of-generation tokens are biased away),
  median of ROUNDS rounds run interleaved, and the decode steps each took.
- The event loop's lag while the async streams run: a 1 ms ticker's worst and p99 delay past its due time, in
  rounds of their own (the ticker takes the GIL a thousand times a second, which the throughput rounds must not
  pay: the ticker is the measurement's cost, not the API's).
- Threads alive during the async streams, against the documented bound: the AsyncHost's pool, its closer thread
  and one stepping thread per model, above the threads alive before.

Standalone: `python bench/asyncio_streams.py` prints the section and replaces it in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from sections import replace_section  # noqa: E402

from llmhost import AsyncHost, Host, HostConfig, InferencingParams, StreamChunk  # noqa: E402
from llmhost.config import ModelConfig  # noqa: E402
from llmhost.domain.types import LogitBias  # noqa: E402

HEADING = "## The asyncio API against threads (bench/asyncio_streams.py)"
MODEL = "gemma-3-270m"
STREAMS = 16
TOKENS = 64
ROUNDS = 3
TICK_S = 0.001
MAX_THREADS = 4  # the AsyncHost's pool in this measurement
END_TOKENS = (1, 106, 212)  # Gemma 3's end-of-generation tokens: biased away, every stream runs TOKENS tokens
PARAMS = InferencingParams(max_tokens=TOKENS, logit_bias=tuple(LogitBias(token_id=t, bias=-100.0) for t in END_TOKENS))


def _tokens(events: list[object]) -> int:
    return sum(len(e.token_ids) for e in events if isinstance(e, StreamChunk))


def threaded(host: Host, tag: str) -> float:
    """Tokens/s of STREAMS threads, each reading a sync stream."""

    def one(i: int) -> int:
        return _tokens(list(host.infer_stream(MODEL, f"{tag} story {i}:", PARAMS)))

    start = time.perf_counter()
    with ThreadPoolExecutor(STREAMS) as pool:
        total = sum(pool.map(one, range(STREAMS)))
    return total / (time.perf_counter() - start)


async def on_loop(host: AsyncHost, tag: str, tick: bool) -> tuple[float, list[float], int]:
    """Tokens/s of STREAMS tasks on this loop; with `tick`, a 1 ms ticker's delays (s); the most threads alive."""
    delays: list[float] = []
    most = threading.active_count()
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal most
        while not done.is_set():
            due = time.perf_counter() + TICK_S
            await asyncio.sleep(TICK_S)
            delays.append(max(0.0, time.perf_counter() - due))
            most = max(most, threading.active_count())

    async def one(i: int) -> int:
        nonlocal most
        stream = await host.infer_stream(MODEL, f"{tag} story {i}:", PARAMS)
        most = max(most, threading.active_count())
        return _tokens([event async for event in stream])

    ticking = asyncio.create_task(ticker()) if tick else None
    start = time.perf_counter()
    total = sum(await asyncio.gather(*(one(i) for i in range(STREAMS))))
    elapsed = time.perf_counter() - start
    done.set()
    if ticking is not None:
        await ticking
    return total / elapsed, delays, most


def run(cache_dir: Path, threads: int = 2) -> list[str]:
    config = HostConfig(
        models={MODEL: ModelConfig(threads=threads, slots=STREAMS, context_length=2048, prefix_cache=False)},
        cache_dir=cache_dir,
    )
    sync_rates: list[float] = []
    async_rates: list[float] = []
    steps: dict[str, list[int]] = {"threads": [], "loop": []}
    delays: list[float] = []
    worst_lags: list[float] = []
    ticked_rates: list[float] = []
    most_threads = 0
    with Host(config) as host:
        host.infer(MODEL, "warm up", InferencingParams(max_tokens=4))
        scheduler = host.engine.engine(MODEL).model(MODEL).scheduler  # type: ignore[attr-defined]
        async_host = AsyncHost(host, max_threads=MAX_THREADS)
        before = threading.active_count()
        for r in range(ROUNDS):  # interleaved: machine noise hits both alike
            first = scheduler.steps
            sync_rates.append(threaded(host, f"Threads{r}"))
            steps["threads"].append(scheduler.steps - first)
            first = scheduler.steps
            rate, _, most = asyncio.run(on_loop(async_host, f"Loop{r}", tick=False))
            steps["loop"].append(scheduler.steps - first)
            async_rates.append(rate)
            most_threads = max(most_threads, most)
        for r in range(ROUNDS):
            rate, lags, most = asyncio.run(on_loop(async_host, f"Tick{r}", tick=True))
            ticked_rates.append(rate)
            delays += lags
            worst_lags.append(max(lags))
            most_threads = max(most_threads, most)
    sync_rate, async_rate = statistics.median(sync_rates), statistics.median(async_rates)
    p99 = sorted(delays)[int(0.99 * (len(delays) - 1))]
    bound = MAX_THREADS + 1 + 1
    return [
        HEADING,
        "",
        f"{STREAMS} streams of {TOKENS} tokens on {MODEL} ({threads} llama.cpp threads, {STREAMS} slots): on one "
        f"event loop through `AsyncHost` against {STREAMS} threads reading the sync API's streams; median of {ROUNDS} "
        "rounds, interleaved. The loop's lag is a 1 ms ticker's delay past its due time while the async streams run, "
        f"in {ROUNDS} rounds of their own.",
        "",
        "| measure | value | goal |",
        "| --- | ---: | ---: |",
        f"| aggregate tokens/s, {STREAMS} threads (sync API) | {sync_rate:.0f} | |",
        f"| aggregate tokens/s, {STREAMS} tasks on one loop (AsyncHost) | {async_rate:.0f} | |",
        f"| async ÷ threads | {async_rate / sync_rate:.2f} | ≥ 0.95 |",
        f"| decode steps per round, threads / loop (median) | {statistics.median(steps['threads']):.0f} / "
        f"{statistics.median(steps['loop']):.0f} | |",
        f"| aggregate tokens/s on the loop with the 1 ms ticker running | {statistics.median(ticked_rates):.0f} | |",
        f"| event loop lag, worst (median over rounds) | {statistics.median(worst_lags) * 1000:.1f} ms | < 10 ms |",
        f"| event loop lag, p99 | {p99 * 1000:.1f} ms | |",
        f"| threads alive above the {before} before, during the async streams | {most_threads - before} | "
        f"≤ {bound} (pool {MAX_THREADS} + closer + 1 stepping thread) |",
        "",
    ]


def main() -> int:
    lines = run(HostConfig().cache_dir)
    print("\n".join(lines))
    replace_section(HEADING, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
