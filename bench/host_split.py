"""Where the host's time per token goes (docs/architecture.md, "The host's time per step"): one greedy 128-token
`Host.infer`, host time (wall time minus the decode) split by timing the sampling (`EngineModel.sample_row`,
`LlamaDecoder.argmax_rows`), the text and stops (`GenerationText.take_token` and `release`, or `on_token` where the
code has no `take_token`), and the events (`Scheduler.deliver`); the rest is everything else. Medians of 5 runs
after a warm-up. Not part of `make bench`: run it against two trees side by side (PYTHONPATH=OTHER/host).

`python bench/host_split.py cpu|sim [MODEL]`: on the CPU model, or with `llama_decode` simulated at 1 ms
(bench/gpu_speed.py). Prints one JSON line of ms per token.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_speed
import host_time

from llmhost import Host, HostConfig, InferencingParams
from llmhost.engine import generation
from llmhost.engine.local import llama_decoder, model, scheduler

PARTS = ("sampling", "text", "events")
GREEDY = InferencingParams(max_tokens=128, temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0)


def timed(spent: collections.Counter[str], cls: type, name: str, part: str) -> None:
    original = getattr(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - started

    setattr(cls, name, wrapper)


def main(mode: str, model_name: str, cache_dir: Path) -> dict[str, float]:
    spent: collections.Counter[str] = collections.Counter()
    timed(spent, model.EngineModel, "sample_row", "sampling")
    timed(spent, llama_decoder.LlamaDecoder, "argmax_rows", "sampling")
    if hasattr(generation.GenerationText, "take_token"):
        timed(spent, generation.GenerationText, "take_token", "text")
        timed(spent, generation.GenerationText, "release", "text")
    else:
        timed(spent, generation.GenerationText, "on_token", "text")
    timed(spent, scheduler.Scheduler, "deliver", "events")
    decoded: Callable[[], float]
    if mode == "sim":
        clock = gpu_speed.simulate()
        config = HostConfig(models={model_name: gpu_speed.model_config(2, -1)}, cache_dir=cache_dir)
        decoded = lambda: clock.read().seconds  # noqa: E731
    else:
        decode_clock = host_time.decode_clock().__enter__()
        config = host_time.host_config(model_name, 2, 0, cache_dir)
        decoded = lambda: decode_clock.seconds  # noqa: E731
    rows: dict[str, list[float]] = collections.defaultdict(list)
    with Host(config) as host:
        host.infer(model_name, "warm up", InferencingParams(max_tokens=4))
        for _ in range(6):
            spent.clear()
            before, started = decoded(), time.perf_counter()
            generated = host.infer(model_name, host_time.PROMPT, GREEDY).usage.generated_token_count
            host_ms = (time.perf_counter() - started - (decoded() - before)) / generated * 1e3
            parts = {part: spent[part] / generated * 1e3 for part in PARTS}
            rows["host"].append(host_ms)
            for part, value in parts.items():
                rows[part].append(value)
            rows["rest"].append(host_ms - sum(parts.values()))
    return {name: round(statistics.median(values[1:]), 3) for name, values in rows.items()}


if __name__ == "__main__":
    args = sys.argv[1:]
    cache = Path(__file__).resolve().parents[1] / ".cache" / "llmhost"
    print(json.dumps(main(args[0] if args else "cpu", args[1] if len(args) > 1 else "gemma-3-270m", cache)))
