"""The compute thread (engine/local/compute.py): one-stream tok/s when requests arrive on several threads, as in
`llmhost serve` or an app that embeds the host, with every llama_decode on the compute thread ÷ on the thread that
asks (each such thread then owns an OpenMP team of llama.cpp threads).

Each variant runs in a fresh process (OpenMP teams live as long as their threads), alternating, `rounds` each.
`run` returns markdown lines for docs/benchmarks.md; `python bench/compute_thread.py` prints them alone.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.limits import GENERATIVE_MODELS

PROMPT = "Once upon a time, there was a dragon who"
TOKENS = 128
CALLERS = 3  # long-lived request threads (a server's worker pool), taking requests in turn


def _rate(cache_dir: Path, model: str, threads: int, direct: bool) -> float:
    """Median tok/s of one stream over the callers' requests, each request alone (in a fresh process)."""
    if direct:
        from llmhost.engine.local import compute

        compute.run = lambda fn, *args: fn(*args)  # the old way: the asking thread decodes
    config = HostConfig(models={model: ModelConfig(threads=threads, slots=4, prefix_cache=False)}, cache_dir=cache_dir)
    params = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0)
    rates: list[float] = []
    with Host(config) as host:
        host.infer(model, PROMPT, InferencingParams(max_tokens=4))  # load and warm up

        def one() -> None:
            started = time.perf_counter()
            result = host.infer(model, PROMPT, params)
            rates.append(result.usage.generated_token_count / (time.perf_counter() - started))

        turns = [threading.Event() for _ in range(CALLERS)]
        done = threading.Event()

        def caller(k: int) -> None:
            for _ in range(2):
                turns[k].wait()
                turns[k].clear()
                one()
                (turns[(k + 1) % CALLERS] if len(rates) < 2 * CALLERS else done).set()

        workers = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
        for w in workers:
            w.start()
        turns[0].set()
        done.wait()
        for w in workers:
            w.join()
    return statistics.median(rates[1:])


def run(cache_dir: Path, threads: int, rounds: int = 2) -> list[str]:
    rows = [
        f"Prompt {PROMPT!r}, {TOKENS} greedy tokens, one request at a time taken in turn by {CALLERS} long-lived "
        f"threads; median tok/s, each variant in a fresh process, alternating, {rounds} rounds.",
        "",
        "| model | decode on the asking thread, tok/s | on the compute thread, tok/s | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    ctx = multiprocessing.get_context("spawn")
    for model in GENERATIVE_MODELS:
        direct, shared, ratios = [], [], []
        for _ in range(rounds):
            with ctx.Pool(1) as pool:
                a = pool.apply(_rate, (cache_dir, model, threads, True))
            with ctx.Pool(1) as pool:
                b = pool.apply(_rate, (cache_dir, model, threads, False))
            direct.append(a)
            shared.append(b)
            ratios.append(b / a)
        rows.append(
            f"| {model} | {statistics.median(direct):.1f} | {statistics.median(shared):.1f} | "
            f"**{statistics.median(ratios):.2f}** |"
        )
    return rows


if __name__ == "__main__":
    from llmhost.config import default_cache_dir

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print("\n".join(run(default_cache_dir(), int(os.environ.get("LLMHOST_BENCH_THREADS", "2")), rounds)))
