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
from llmhost.types import BeamParams

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
        engine_model: Any = host.engine.model(model)  # type: ignore[attr-defined]
        decodes = [0]
        original = engine_model._decode

        def counting(*args: Any, **kwargs: Any) -> int:
            decodes[0] += 1
            return int(original(*args, **kwargs))

        engine_model._decode = counting
        seq = host.open_sequence(model)
        seq.append(PROMPT)
        greedy = InferencingParams(max_tokens=STEPS, temperature=0.0, repeat_penalty=1.0)
        beam_ratios, score_ratios = [], []
        greedy_steps, beam_steps, score_times, append_times = [], [], [], []
        for _ in range(rounds + 1):  # the first round warms up
            fork = seq.fork()
            before = decodes[0]
            seconds = _timed(lambda f=fork: f.generate(greedy))  # type: ignore[misc]
            greedy_step = seconds / max(1, decodes[0] - before)
            fork.close()
            before = decodes[0]
            beams: list[Any] = []
            seconds = _timed(lambda b=beams: b.extend(seq.beam_search(BeamParams(width=WIDTH, max_tokens=STEPS))))  # type: ignore[misc]
            beam_step = seconds / max(1, decodes[0] - before)
            for beam, _ in beams:
                beam.close()
            scored = _timed(lambda: seq.score(CONTINUATIONS))

            def appends() -> None:
                for text in CONTINUATIONS:
                    f = seq.fork()
                    f.append(text)
                    f.close()

            appended = _timed(appends)
            greedy_steps.append(greedy_step)
            beam_steps.append(beam_step)
            score_times.append(scored)
            append_times.append(appended)
            beam_ratios.append(beam_step / greedy_step)
            score_ratios.append(scored / appended)
        seq.close()
    beam_ratio = statistics.median(beam_ratios[1:])
    score_ratio = statistics.median(score_ratios[1:])
    return [
        f"Prompt {PROMPT!r}, slots 8; median of {rounds} rounds (after one warm-up), each round timing every variant "
        "back to back.",
        "",
        "| measure | value | target |",
        "| --- | ---: | ---: |",
        f"| beam search width {WIDTH}, {STEPS} tokens: time per step | "
        f"{statistics.median(beam_steps[1:]) * 1000:.1f} ms | |",
        f"| greedy generation, {STEPS} tokens: time per step | {statistics.median(greedy_steps[1:]) * 1000:.1f} ms | |",
        f"| beam step ÷ greedy step | **{beam_ratio:.2f}** | ≤ 2.0 |",
        f"| `score` of {len(CONTINUATIONS)} continuations | {statistics.median(score_times[1:]) * 1000:.1f} ms | |",
        f"| {len(CONTINUATIONS)} separate `append`s to forks | {statistics.median(append_times[1:]) * 1000:.1f} ms | |",
        f"| score ÷ appends | **{score_ratio:.2f}** | ≤ 0.5 |",
    ]


if __name__ == "__main__":
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    gpu = int(os.environ.get("LLMHOST_BENCH_N_GPU_LAYERS", "0"))
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print("\n".join(run(HostConfig(), "gemma-3-270m", threads, gpu, rounds)))
