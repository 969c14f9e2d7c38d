"""Host time outside `llama_decode` (part of `make bench`): the wall time of a generation minus the time spent in
`LlamaDecoder.decode`, the one place a decode happens, per token (one stream) or per decode call (8 streams), with
the rows each call held. Greedy, 128 tokens, on the real CPU model. Whatever the host does serially around a
decode step adds to every step; at GPU speed (a step of 1 to 3 ms) it sets the throughput.

`python bench/host_time.py [ROUNDS]` prints the table for both built-in models (each in a fresh process).

`python bench/host_time.py --gpu [--tokens N] [--guest WASM] [ROUNDS]`: the GPU timing method (bench/gpu_timing.py)
on the configured models, offloaded: `llama_synchronize` right after `llama_decode` inside the timed decode; tokens/s,
host ms per token and per step, efficiency and rows per step, at 1, 8 and 32 streams. Runs on a CPU-only build too
(the offload is ignored; the same table). `--guest`: a prebuilt bench/guest component, where componentize-py is not
installed (a GPU machine); `--tokens`: fewer tokens per generation for a quick run.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.domain.limits import GENERATIVE_MODELS
from llmhost.domain.types import Constraint

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Once upon a time, there was a dragon who"
TOKENS = 128
STREAMS = 8
SUBJECTS = ["dragon", "cat", "king", "robot", "wizard", "fox", "ship", "tree"]
GREEDY = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0)
# Issue 37's targets: host ms per token (1 stream) / per step (8 streams), and rows per decode call.
TARGETS = {
    "gemma-3-270m": {"api": 0.15, "stream": 0.25, "eight": 0.8, "rows": 6.5},
    "smollm2-135m": {"api": 0.10, "stream": 0.20, "eight": 0.5, "rows": 6.5},
}


@dataclass
class DecodeClock:
    """Time spent in `LlamaDecoder.decode`, its calls and the rows they held, since the last `reset`."""

    seconds: float = 0.0
    calls: int = 0
    rows: int = 0

    def reset(self) -> None:
        self.seconds, self.calls, self.rows = 0.0, 0, 0


@contextmanager
def decode_clock(synchronize: bool = False) -> Iterator[DecodeClock]:
    """Wrap `LlamaDecoder.decode` (every decode of the engine goes through it) with a clock. `synchronize`: call
    `llama_synchronize` right after it, inside the timed region (the GPU timing method, bench/gpu_timing.py)."""
    from llmhost.engine.local.llama_decoder import LlamaDecoder

    clock = DecodeClock()
    original = LlamaDecoder.decode

    def decode(self: Any, rows: Any, logits_at: Any) -> int:
        started = time.perf_counter()
        try:
            rc = original(self, rows, logits_at)
            if synchronize:
                self.lib.llama_synchronize(self.ctx)
            return rc
        finally:
            clock.seconds += time.perf_counter() - started
            clock.calls += 1
            clock.rows += len(rows)

    LlamaDecoder.decode = decode  # type: ignore[method-assign]
    try:
        yield clock
    finally:
        LlamaDecoder.decode = original  # type: ignore[method-assign]


def host_config(model: str, threads: int, n_gpu_layers: int, cache_dir: Path) -> HostConfig:
    return HostConfig(
        models={
            model: ModelConfig(
                threads=threads, n_gpu_layers=n_gpu_layers, slots=STREAMS, context_length=1024, prefix_cache=False
            )
        },
        cache_dir=cache_dir,
        compile_strategy="optimized",
    )


def one_api(host: Host, model: str, clock: DecodeClock) -> tuple[float, float]:
    """(host seconds per token, decode seconds per token) of one greedy `Host.infer`."""
    clock.reset()
    started = time.perf_counter()
    generated = host.infer(model, PROMPT, GREEDY).usage.generated_token_count
    wall = time.perf_counter() - started
    return (wall - clock.seconds) / generated, clock.seconds / generated


def one_guest(app: Any, command: str, model: str, clock: DecodeClock) -> tuple[float, float]:
    """The same through a guest (bench/guest: `infer` or `stream`), timed inside the guest."""
    clock.reset()
    done = app.run_captured([command, model, str(TOKENS), PROMPT])
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    generated, seconds = int(report["generated"]), float(report["seconds"])
    return (seconds - clock.seconds) / generated, clock.seconds / generated


def concurrent_streams(
    host: Host, model: str, n: int, tag: str, params: InferencingParams, at_start: Callable[[], object]
) -> tuple[float, list[int]]:
    """n `Host.infer_stream` readers on threads at once, distinct short prompts; `at_start()` runs just before
    they start. Returns the wall seconds and each finished stream's generated token count."""
    counts: list[int] = []

    def read(prompt: str) -> None:
        for event in host.infer_stream(model, prompt, params):
            if not isinstance(event, StreamChunk):
                counts.append(event.usage.generated_token_count)

    threads = [
        threading.Thread(target=read, args=(f"{tag} {i}: Once upon a time, there was a {SUBJECTS[i % 8]} who",))
        for i in range(n)
    ]
    at_start()
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, counts


def streams(host: Host, model: str, clock: DecodeClock, n: int, tag: str) -> tuple[float, float, float]:
    """n concurrent greedy streams through the Python API: (host seconds per decode call, rows per call,
    decode seconds per call)."""
    wall, counts = concurrent_streams(host, model, n, tag, GREEDY, clock.reset)
    assert counts == [TOKENS] * n, counts
    return (wall - clock.seconds) / clock.calls, clock.rows / clock.calls, clock.seconds / clock.calls


# Sampling features and the path each takes, for the cost table (`features`): the host sampler covers greedy and
# top-k draws; log-probabilities read the whole row (a log-sum-exp over the vocabulary); a constraint masks it;
# temperature with top-k off keeps llama.cpp's chain (host_sampler.eligible).
FEATURES: dict[str, InferencingParams] = {
    "greedy (host sampler)": GREEDY,
    "greedy + repeat penalty 1.1 (host sampler)": GREEDY.model_copy(update={"repeat_penalty": 1.1}),
    "default draw: top-k 40, top-p 0.9, temperature 0.8, repeat penalty 1.1 (host sampler for Gemma; "
    "llama.cpp's chain under 131,072 tokens)": InferencingParams(max_tokens=TOKENS, seed=1),
    "temperature 0.8, top-k off (llama.cpp's chain)": InferencingParams(
        max_tokens=TOKENS, seed=1, top_k=0, top_p=1.0, repeat_penalty=1.0
    ),
    "greedy + logprobs 5 (the whole row, host side)": GREEDY.model_copy(update={"logprobs": 5}),
    "greedy + regex constraint (llguidance mask)": GREEDY.model_copy(
        update={"constraint": Constraint.regex("( [a-z]+[,.])+"), "stop": ()}
    ),
}


def features(host: Host, model: str, clock: DecodeClock, rounds: int) -> dict[str, float]:
    """Host ms per token of one stream through the Python API, for each of `FEATURES` (medians)."""
    found: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, params in FEATURES.items():
            clock.reset()
            started = time.perf_counter()
            generated = host.infer(model, PROMPT, params).usage.generated_token_count
            wall = time.perf_counter() - started
            found.setdefault(name, []).append((wall - clock.seconds) / generated * 1e3)
    return {name: statistics.median(values) for name, values in found.items()}


def measure(model: str, threads: int, n_gpu_layers: int, cache_dir: Path, rounds: int) -> dict[str, float]:
    """Medians over `rounds` of every measure of one model (run in a fresh process)."""
    from llmhost.toolchains.python import build_component

    wasm = build_component(ROOT / "bench" / "guest", cache_dir / "bench" / "bench-guest.wasm")
    runs: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        runs.setdefault(name, []).append(value)

    with decode_clock() as clock, Host(host_config(model, threads, n_gpu_layers, cache_dir)) as host:
        app = host.load(wasm)
        host.infer(model, "warm up", InferencingParams(max_tokens=4))
        app.run_captured(["stream", model, "4", "warm up"])
        for r in range(rounds):
            host_s, decode_s = one_api(host, model, clock)
            add("api", host_s * 1e3)
            add("api_decode", decode_s * 1e3)
            host_s, decode_s = one_guest(app, "infer", model, clock)
            add("infer", host_s * 1e3)
            host_s, decode_s = one_guest(app, "stream", model, clock)
            add("stream", host_s * 1e3)
            step_s, rows, decode_s = streams(host, model, clock, STREAMS, f"Round {r}")
            add("eight", step_s * 1e3)
            add("rows", rows)
            add("eight_decode", decode_s * 1e3)
        costs = features(host, model, clock, rounds)
    result = {name: statistics.median(values) for name, values in runs.items()}
    return result | {f"feature:{name}": value for name, value in costs.items()}


def isolated(fn: Callable[..., Any], *args: Any) -> Any:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def _cell(f: dict[str, float], t: dict[str, float], name: str, fmt: str = ".3f", at_least: bool = False) -> str:
    """A measure, with its target and whether it is met where it has one."""
    target = t.get(name)
    if target is None:
        return f"{f[name]:{fmt}}"
    met = f[name] >= target if at_least else f[name] <= target
    return f"{f[name]:{fmt}} ({'≥' if at_least else '≤'} {target}: {'met' if met else 'NOT met'})"


def run(cache_dir: Path, threads: int, n_gpu_layers: int, rounds: int = 3) -> list[str]:
    found = {model: isolated(measure, model, threads, n_gpu_layers, cache_dir, rounds) for model in GENERATIVE_MODELS}
    rows = [
        f"Prompt {PROMPT!r}, greedy, {TOKENS} tokens; wall time minus the time inside `LlamaDecoder.decode`; "
        f"median of {rounds} rounds, each model in a fresh process. Guest figures are timed inside the guest "
        f"(bench/guest). {STREAMS} streams: concurrent `Host.infer_stream` readers, host time per decode call.",
        "",
        "| model | 1 stream, Python API (ms/token) | guest `infer` (ms/token) | guest `infer-stream` (ms/token) "
        f"| {STREAMS} streams (ms/step) | rows per decode call | decode per token / per {STREAMS}-stream call |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model, f in found.items():
        t = TARGETS.get(model, {})
        cell = functools.partial(_cell, f, t)
        rows.append(
            f"| {model} | {cell('api')} | {f['infer']:.3f} | {cell('stream')} | {cell('eight')} | "
            f"{cell('rows', '.2f', True)} | {f['api_decode']:.2f} / {f['eight_decode']:.2f} ms |"
        )
    rows += [
        "",
        "Where a feature needs the host-side path, its cost: host ms per token, one stream, Python API, "
        f"{TOKENS} tokens (a constrained or sampled run may end earlier; per generated token).",
        "",
        "| params (path) | " + " | ".join(found) + " |",
        "| --- | " + " | ".join("---:" for _ in found) + " |",
    ]
    for name in FEATURES:
        rows.append(f"| {name} | " + " | ".join(f"{f[f'feature:{name}']:.3f}" for f in found.values()) + " |")
    return rows


# --- `--gpu`: the GPU timing method (bench/gpu_timing.py) -------------------------------------------------------

GPU_SLOTS = 32
GPU_PATHS = {
    "api": "1 stream, Python API",
    "infer": "1 stream, guest `infer`",
    "stream": "1 stream, guest `infer-stream`",
    "streams8": "8 streams, `Host.infer_stream`",
    "streams32": "32 streams, `Host.infer_stream`",
}


def timed(clock: DecodeClock, wall: float, generated: int) -> dict[str, float]:
    """One run's figures from its wall time, its tokens and the decode clock (reset just before it)."""
    if generated <= 0 or clock.calls == 0:
        raise RuntimeError(f"a timed run generated {generated} tokens in {clock.calls} decode calls")
    host = wall - clock.seconds
    return {
        "tokens_per_s": generated / wall,
        "host_ms_token": host / generated * 1e3,
        "host_ms_step": host / clock.calls * 1e3,
        "efficiency": clock.seconds / wall,
        "rows": clock.rows / clock.calls,
    }


def gpu_measure(
    model: str, config: ModelConfig, cache_dir: Path, guest: Path | None, tokens: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Medians over `rounds` of every path of one model (run in a fresh process). A random-weight model (the GPU
    kit's) may end a generation early: figures are per generated token, and rows per step show the streams."""
    from llmhost.toolchains.python import build_component

    wasm = guest or build_component(ROOT / "bench" / "guest", cache_dir / "bench" / "bench-guest.wasm")
    params = GREEDY.model_copy(update={"max_tokens": tokens})
    host_config = HostConfig(models={model: config}, cache_dir=cache_dir, compile_strategy="optimized")
    runs: dict[str, list[dict[str, float]]] = {}
    with decode_clock(synchronize=True) as clock, Host(host_config) as host:
        app = host.load(wasm)
        host.infer(model, "warm up", InferencingParams(max_tokens=4))
        app.run_captured(["stream", model, "4", "warm up"])
        concurrent_streams(host, model, GPU_SLOTS, "Warm", params.model_copy(update={"max_tokens": 4}), clock.reset)
        for r in range(rounds):
            clock.reset()
            started = time.perf_counter()
            generated = host.infer(model, PROMPT, params).usage.generated_token_count
            runs.setdefault("api", []).append(timed(clock, time.perf_counter() - started, generated))
            for command in ("infer", "stream"):
                clock.reset()
                done = app.run_captured([command, model, str(tokens), PROMPT])
                report = json.loads(done.stdout.decode().strip().splitlines()[-1])
                runs.setdefault(command, []).append(timed(clock, float(report["seconds"]), int(report["generated"])))
            for n in (8, GPU_SLOTS):
                wall, counts = concurrent_streams(host, model, n, f"Round {r}", params, clock.reset)
                assert len(counts) == n, f"{n - len(counts)} of {n} streams failed"
                runs.setdefault(f"streams{n}", []).append(timed(clock, wall, sum(counts)))
    return {path: {k: statistics.median(run[k] for run in found) for k in found[0]} for path, found in runs.items()}


def run_gpu(threads: int, rounds: int = 3, tokens: int = TOKENS, guest: Path | None = None) -> list[str]:
    from gpu_timing import configured, describe

    config, models = configured(threads, slots=GPU_SLOTS, context_length=1024, prefix_cache=False)
    rows = [
        "GPU timing method (bench/gpu_timing.py): `llama_synchronize(ctx)` right after `llama_decode`, inside the "
        "timed `LlamaDecoder.decode`; host time = wall time minus that. "
        f"Prompt {PROMPT!r}, greedy, {tokens} tokens; every layer offloaded, {GPU_SLOTS} slots, no prefix cache; "
        f"median of {rounds} rounds, each model in a fresh process. Guest figures are timed inside the guest "
        "(bench/guest). Efficiency = decode time ÷ wall time. Streams: concurrent `Host.infer_stream` readers. "
        + describe(config.cache_dir),
        "",
        "| model | path | tokens/s | host ms per token | host ms per step | efficiency | rows per step |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model, model_config in models.items():
        found = isolated(gpu_measure, model, model_config, config.cache_dir, guest, tokens, rounds)
        for path, label in GPU_PATHS.items():
            f = found[path]
            rows.append(
                f"| {model} | {label} | {f['tokens_per_s']:.0f} | {f['host_ms_token']:.3f} | {f['host_ms_step']:.3f} "
                f"| {f['efficiency']:.3f} | {f['rows']:.2f} |"
            )
    return rows


if __name__ == "__main__":
    import os

    from llmhost.config import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=3, help="rounds (the median is reported)")
    parser.add_argument("--gpu", action="store_true", help="the GPU timing method, on the configured models offloaded")
    parser.add_argument("--tokens", type=int, help=f"--gpu: tokens per generation (default {TOKENS})")
    parser.add_argument("--guest", type=Path, help="--gpu: a prebuilt bench/guest component")
    args = parser.parse_args()
    if not args.gpu and (args.tokens is not None or args.guest is not None):
        parser.error("--tokens and --guest go with --gpu")
    if args.tokens is not None and args.tokens < 1:
        parser.error("--tokens must be at least 1")
    if args.guest is not None and not args.guest.is_file():
        parser.error(f"--guest {args.guest}: no such file (build it with `llmhost build bench/guest`)")
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    if args.gpu:
        print("\n".join(run_gpu(threads, args.rounds, args.tokens or TOKENS, args.guest)))
    else:
        gpu = int(os.environ.get("LLMHOST_BENCH_N_GPU_LAYERS", "0"))
        print("\n".join(run(default_cache_dir(), threads, gpu, args.rounds)))
