"""Guest-side sampling (`sequence.next-token-logprobs`), on each built-in model, timed inside the guest:

  - a guest greedy loop on `next-token-logprobs(1)` + `append-tokens` ÷ one `sequence.generate`, tok/s over
    128 tokens (target ≥ 0.85);
  - 8 such loops running at once (8 guest runs on 8 threads), aggregate tok/s ÷ one loop (target ≥ 2.0): their
    steps decode in the model's shared batch. Both are timed after the prompt; the 8 over the union of their
    windows (the guests' wall clock).

`run` returns markdown lines for docs/benchmarks.md; `python bench/processors.py` prints them alone.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from llmhost import Host, HostConfig, InferencingParams, build_component
from llmhost.config import ModelConfig
from llmhost.domain.limits import GENERATIVE_MODELS

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Once upon a time, there was a dragon who"
TOKENS = 128
LOOPS = 8


def _run_guest(app: Any, *args: str) -> dict[str, Any]:
    out: list[Any] = []
    code = app.run(list(args), stdout=out.append, stderr=lambda _: None)
    assert code == 0, out
    text = "".join(o.decode() if isinstance(o, bytes) else o for o in out)
    return dict(json.loads(text.strip().splitlines()[-1]))


def _model_rows(
    host: Host, app: Any, model: str, rounds: int
) -> tuple[list[float], list[float], list[float], list[float], float, float]:
    """Per round: loop ÷ generate (tok/s), 8 loops aggregate ÷ one loop, the same ratio inside `llama_decode`
    alone (the ceiling the decoder sets: tokens per decode second), 8 streams ÷ one stream; plus median tok/s of
    generate and of a loop."""
    ratios, scale, decode_scale, streams = [], [], [], []
    gen_rates, loop_rates = [], []
    engine_model: Any = host.engine.model(model)

    def decode_rate(fn: Any) -> tuple[float, list[dict[str, Any]]]:
        """`fn()`'s guest results, and the tokens they generated per second inside llama_decode."""
        before = engine_model.decode_seconds
        results = fn()
        return sum(r["generated"] for r in results) / (engine_model.decode_seconds - before), results

    _run_guest(app, "seq-loop", model, "8", PROMPT)  # warm-up
    for _ in range(rounds):
        gen = _run_guest(app, "seq-generate", model, str(TOKENS), PROMPT)
        one_decode, (loop,) = decode_rate(lambda: [_run_guest(app, "seq-loop", model, str(TOKENS), PROMPT)])
        gen_rate, loop_rate = gen["generated"] / gen["seconds"], loop["generated"] / loop["seconds"]
        gen_rates.append(gen_rate)
        loop_rates.append(loop_rate)
        ratios.append(loop_rate / gen_rate)
        results: list[dict[str, Any]] = []

        def one(into: list[dict[str, Any]] = results) -> None:
            into.append(_run_guest(app, "seq-loop", model, str(TOKENS), PROMPT))  # list.append is atomic

        def loops(into: list[dict[str, Any]] = results) -> list[dict[str, Any]]:
            threads = [threading.Thread(target=one) for _ in range(LOOPS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return into

        decode_scale.append(decode_rate(loops)[0] / one_decode)
        # Timed as one loop is, after the prompts: from the first loop's start to the last one's end, by the
        # guests' wall clock (the 8 instantiations and prompt appends are not guest-side sampling).
        window = max(r["ended_at"] for r in results) - min(r["started_at"] for r in results)
        scale.append(sum(r["generated"] for r in results) / window / loop_rate)
        streams.append(_streams_scale(host, model))
    return ratios, scale, decode_scale, streams, statistics.median(gen_rates), statistics.median(loop_rates)


def _streams_scale(host: Host, model: str) -> float:
    """8 concurrent `generate` streams (Python API) aggregate ÷ one: what batching gives on this machine at all."""
    engine = host.engine.engine(model)
    params = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0)

    def rate(count: int) -> float:
        done: list[int] = []

        def one(i: int) -> None:
            done.append(engine.infer(model, f"{PROMPT} {i}", params).usage.generated_token_count)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (time.perf_counter() - started)

    return rate(LOOPS) / rate(1)


def run(cache_dir: Path, threads: int, n_gpu_layers: int, rounds: int = 3) -> list[str]:
    wasm = build_component(ROOT / "bench" / "guest", cache_dir / "bench" / "processors-guest.wasm")
    models = {
        name: ModelConfig(
            threads=threads, n_gpu_layers=n_gpu_layers, slots=LOOPS, context_length=1024, prefix_cache=False
        )
        for name in GENERATIVE_MODELS
    }
    rows = [
        f"Prompt {PROMPT!r}, {TOKENS} greedy tokens, slots {LOOPS}; median of {rounds} rounds, each timing "
        "`generate`, one loop and 8 concurrent loops back to back (tok/s inside the guest, after the prompt).",
        "",
        "| model | `generate` tok/s | loop tok/s | loop ÷ `generate` (≥ 0.85) | 8 loops aggregate ÷ one loop (≥ 2.0) "
        "| the same inside `llama_decode` alone (the decoder's ceiling) | 8 `generate` streams ÷ one |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    with Host(HostConfig(models=models, cache_dir=cache_dir)) as host:
        app = host.load(wasm)
        for model in GENERATIVE_MODELS:
            ratios, scale, decode_scale, streams, gen_rate, loop_rate = _model_rows(host, app, model, rounds)
            rows.append(
                f"| {model} | {gen_rate:.1f} | {loop_rate:.1f} | **{statistics.median(ratios):.2f}** | "
                f"**{statistics.median(scale):.2f}** | {statistics.median(decode_scale):.2f} | "
                f"{statistics.median(streams):.2f} |"
            )
    return rows


if __name__ == "__main__":
    from llmhost.config import default_cache_dir

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    print("\n".join(run(default_cache_dir(), threads, int(os.environ.get("LLMHOST_BENCH_N_GPU_LAYERS", "0")), rounds)))
