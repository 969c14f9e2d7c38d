"""Cold start (part of `make bench`): the time to a generation's first token when its model is not loaded (the
load included: models load at their first use and unload when idle) against the same request on the loaded model.

Per built-in model, in turn: ROUNDS times, the model is unloaded (`LlamaCppEngine.unload_idle`), then one request
is timed cold and one warm, from the call to its first chunk (greedy, the same short prompt; the warm one reuses no
prompt prefix: `prefix-cache = false`). Medians; also the footprint the memory budget counts for the model.

For bench/run.py: `lines = cold_start.run(cache_dir, threads)` gives the section's markdown lines.
Standalone: `python bench/cold_start.py` prints them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from llmhost.config import HostConfig, ModelConfig
from llmhost.domain.limits import DEFAULT_MODEL, SMOLLM2_MODEL
from llmhost.domain.types import InferencingParams, StreamChunk
from llmhost.engine.local.engine import LlamaCppEngine

HEADING = "## Cold start (bench/cold_start.py)"
MODELS = (DEFAULT_MODEL, SMOLLM2_MODEL)
ROUNDS = 5
PROMPT = "The capital of France is"
PARAMS = InferencingParams(max_tokens=4, temperature=0.0)


def first_token_s(engine: LlamaCppEngine, model: str) -> float:
    """Seconds from the call to the first chunk (the model loaded first if it is not)."""
    started = time.perf_counter()
    generation = engine.stream(model, PROMPT, PARAMS)
    try:
        for event in generation:
            if isinstance(event, StreamChunk):
                return time.perf_counter() - started
    finally:
        generation.close()
    raise RuntimeError(f"{model} gave no chunk")


def measure(cache_dir: Path, model: str, threads: int, rounds: int = ROUNDS) -> tuple[float, float, int]:
    """(median cold first-token s, median warm first-token s, footprint bytes) of one model."""
    config = ModelConfig(threads=threads, prefix_cache=False, keep_alive_s=-1)
    engine = LlamaCppEngine({model: config}, cache_dir)
    cold: list[float] = []
    warm: list[float] = []
    try:
        first_token_s(engine, model)  # llama.cpp's library and the file's first read, out of the figures
        for _ in range(rounds):
            engine.unload_idle([model])
            cold.append(first_token_s(engine, model))
            warm.append(first_token_s(engine, model))
        footprint = engine.residency()[0].bytes
    finally:
        engine.close()
    return statistics.median(cold), statistics.median(warm), footprint


def run(cache_dir: Path, threads: int = 2, models: tuple[str, ...] = MODELS) -> list[str]:
    """The section's markdown lines."""
    lines = [
        HEADING,
        "",
        f"Time to the first token, median of {ROUNDS}: cold (the model unloaded, its load included) and warm.",
        "",
        "| model | footprint | cold first token | warm first token | cold − warm (the load) |",
        "|---|---:|---:|---:|---:|",
    ]
    for model in models:
        cold, warm, footprint = measure(cache_dir, model, threads)
        lines.append(
            f"| {model} | {footprint / 2**20:.0f} MB | {cold * 1000:.0f} ms | {warm * 1000:.0f} ms | "
            f"{(cold - warm) * 1000:.0f} ms |"
        )
    return [*lines, ""]


if __name__ == "__main__":
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print("\n".join(run(HostConfig().cache_dir, threads)))
