"""Guest SDK host calls: beam search (one batch per step over forks) and `score` (continuations in one batch).

  - beam search of width 4: wall time per step (per decode) ÷ the wall time of one greedy generation step on the
    same prompt (target ≤ 2.0);
  - `score` of 8 continuations ÷ 8 separate `append`s of them to forks of the same sequence (target ≤ 0.5).

Through the engine's Python API (the guest adds one host call each). `run` returns markdown lines for
docs/benchmarks.md; `python bench/sdk.py` prints them alone.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.types import BeamParams

PROMPT = "Once upon a time, there was a dragon who"
STEPS = 24
WIDTH = 4
CONTINUATIONS = [
    " lived in a cave",
    " loved to eat apples",
    " could not fly at all",
    " was afraid of the dark",
    " guarded a golden treasure",
    " sang songs every night",
    " had three heads",
    " wanted to be a knight",
]


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(config: HostConfig, model: str, threads: int, n_gpu_layers: int, rounds: int = 5) -> list[str]:
    cfg = config.model_copy(
        update={
            "models": {
                model: ModelConfig(
                    threads=threads, n_gpu_layers=n_gpu_layers, slots=8, context_length=1024, prefix_cache=False
                )
            }
        }
    )
    with Host(cfg) as host:
        engine_model: Any = host.engine.model(model)
        decodes = [0]
        original = engine_model._decode

        def counting(*args: Any, **kwargs: Any) -> int:
            decodes[0] += 1
            return int(original(*args, **kwargs))

        engine_model._decode = counting
        seq = host.open_sequence(model)
        seq.append(PROMPT)
        greedy = InferencingParams(max_tokens=STEPS, temperature=0.0, repeat_penalty=1.0)

        def measure(fn: Any) -> tuple[float, int, float]:
            """Wall seconds, decodes, and seconds inside llama_decode of `fn()`."""
            count, inside = decodes[0], engine_model.decode_seconds
            seconds = _timed(fn)
            return seconds, decodes[0] - count, engine_model.decode_seconds - inside

        rows: dict[str, list[float]] = {k: [] for k in ("greedy", "beam", "greedy_d", "beam_d", "score", "append")}
        rows.update(score_d=[], append_d=[])
        for _ in range(rounds + 1):  # the first round warms up
            fork = seq.fork()
            seconds, count, inside = measure(lambda f=fork: f.generate(greedy))
            rows["greedy"].append(seconds / max(1, count))
            rows["greedy_d"].append(inside / max(1, count))
            fork.close()
            beams: list[Any] = []
            seconds, count, inside = measure(
                lambda b=beams: b.extend(seq.beam_search(BeamParams(width=WIDTH, max_tokens=STEPS)))
            )
            rows["beam"].append(seconds / max(1, count))
            rows["beam_d"].append(inside / max(1, count))
            for beam, _ in beams:
                beam.close()
            seconds, _, inside = measure(lambda: seq.score(CONTINUATIONS))
            rows["score"].append(seconds)
            rows["score_d"].append(inside)

            def appends() -> None:
                for text in CONTINUATIONS:
                    f = seq.fork()
                    f.append(text)
                    f.close()

            seconds, _, inside = measure(appends)
            rows["append"].append(seconds)
            rows["append_d"].append(inside)
        seq.close()

    def med(key: str) -> float:
        return statistics.median(rows[key][1:])

    def ratio(a: str, b: str) -> float:
        return statistics.median([x / y for x, y in zip(rows[a][1:], rows[b][1:], strict=True)])

    return [
        f"Prompt {PROMPT!r}, slots 8; median of {rounds} rounds (after one warm-up), each round timing every variant "
        'back to back. "decode only" counts the time inside `llama_decode` alone: the floor the host\'s own work '
        "sits on. Every beam and every scored token needs its logits row, and with Gemma 3's 262k-token vocabulary "
        "the output projection of a row costs more than the rest of the model on this CPU, so a batch of 4 "
        "logits rows costs over twice one row, and scoring (a row per token) more than appends (a row per "
        "append); on a GPU the batch is nearly free.",
        "",
        "| measure | value | decode only | target |",
        "| --- | ---: | ---: | ---: |",
        f"| beam search width {WIDTH}, {STEPS} tokens: time per step | {med('beam') * 1000:.1f} ms | "
        f"{med('beam_d') * 1000:.1f} ms | |",
        f"| greedy generation, {STEPS} tokens: time per step | {med('greedy') * 1000:.1f} ms | "
        f"{med('greedy_d') * 1000:.1f} ms | |",
        f"| beam step ÷ greedy step | **{ratio('beam', 'greedy'):.2f}** | {ratio('beam_d', 'greedy_d'):.2f} | ≤ 2.0 |",
        f"| `score` of {len(CONTINUATIONS)} continuations | {med('score') * 1000:.1f} ms | "
        f"{med('score_d') * 1000:.1f} ms | |",
        f"| {len(CONTINUATIONS)} separate `append`s to forks | {med('append') * 1000:.1f} ms | "
        f"{med('append_d') * 1000:.1f} ms | |",
        f"| score ÷ appends | **{ratio('score', 'append'):.2f}** | {ratio('score_d', 'append_d'):.2f} | ≤ 0.5 |",
    ]


if __name__ == "__main__":
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    gpu = int(os.environ.get("LLMHOST_BENCH_N_GPU_LAYERS", "0"))
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print("\n".join(run(HostConfig(), "gemma-3-270m", threads, gpu, rounds)))
