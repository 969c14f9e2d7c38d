"""A JavaScript guest beside a Python one (part of `make bench`): the same programs built with componentize-js and
componentize-py, measured side by side.

- Component size of the `command` benchmark guest (bench/js_guest, bench/guest) and of the trivial `http-app`
  handler (bench/http_guest_js, bench/http_guest).
- First-run compile: the component compiled from its bytes by wasmtime, as `llmhost run` does on a cold cache,
  with Cranelift (optimized) and with Winch (fast-first's first step); one compile each, in turn.
- Per request under `llmhost serve`: a new store and instance of the http-app guest, and a whole in-process
  `handle` call (bench/serve.py's instance_cost), p50.
- `infer` decode ÷ the bare loop: one greedy `infer` of TOKENS tokens timed inside the guest, against run.py's bare
  llama_decode loop, interleaved, median of ROUNDS, per built-in model.

Standalone: `python bench/js_guests.py` prints the section and replaces it in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from bare import PROMPT, TOKENS, Bare, model_path
from sections import replace_section

from llmhost import Host, HostConfig
from llmhost.config import ModelConfig
from llmhost.domain.limits import GENERATIVE_MODELS
from llmhost.toolchains import build_component

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## JavaScript guests beside Python ones (bench/js_guests.py)"
ROUNDS = 5
GUESTS = {  # language -> (command guest, http-app guest)
    "Python (componentize-py 0.25.1)": ("guest", "http_guest"),
    "JavaScript (componentize-js 0.23.0)": ("js_guest", "http_guest_js"),
}


def _build(cache_dir: Path) -> dict[str, tuple[Path, Path]]:
    out = cache_dir / "bench"
    return {
        language: (
            build_component(ROOT / "bench" / command, out / f"{command}.wasm", "command"),
            build_component(ROOT / "bench" / http, out / f"{http}.wasm", "http-app"),
        )
        for language, (command, http) in GUESTS.items()
    }


def _compile_seconds(wasm: Path, strategy: str) -> float:
    from wasmtime.component import Component

    from llmhost.runtime.components import create_wasmtime_engine

    engine = create_wasmtime_engine(strategy)  # type: ignore[arg-type]
    data = wasm.read_bytes()
    started = time.perf_counter()
    Component(engine, data)
    return time.perf_counter() - started


def _decode_ratios(config: HostConfig, wasms: dict[str, Path], model: str) -> dict[str, tuple[float, float]]:
    """tokens/s of each language's guest `infer` and its ratio to the bare loop (medians of interleaved rounds)."""
    bare = Bare(model_path(model, config.cache_dir))
    with Host(config) as host:
        apps = {language: host.load(wasm) for language, wasm in wasms.items()}

        def guest(language: str) -> float:
            done = apps[language].run_captured(["infer", model, str(TOKENS), PROMPT])
            report = json.loads(done.stdout.decode().strip().splitlines()[-1])
            return int(report["generated"]) / float(report["seconds"])

        for language in apps:  # warm up: the model loads, the first call's caches fill
            guest(language)
        bare.run()
        speeds: dict[str, list[float]] = {language: [] for language in apps}
        ratios: dict[str, list[float]] = {language: [] for language in apps}
        for _ in range(ROUNDS):
            n, seconds = bare.run()
            bare_speed = n / seconds
            for language in apps:
                speed = guest(language)
                speeds[language].append(speed)
                ratios[language].append(speed / bare_speed)
    return {language: (statistics.median(speeds[language]), statistics.median(ratios[language])) for language in apps}


def run(cache_dir: Path, threads: int) -> list[str]:
    from serve import instance_cost

    built = _build(cache_dir)
    rows = []
    for language, (command, http) in built.items():
        cranelift, winch = _compile_seconds(command, "cranelift"), _compile_seconds(command, "winch")
        create, call = instance_cost(http, cache_dir)
        rows.append(
            f"| {language} | {command.stat().st_size / 1e6:.1f} MB | {http.stat().st_size / 1e6:.1f} MB "
            f"| {cranelift:.1f} s | {winch:.1f} s | {create * 1000:.2f} ms | {call * 1000:.2f} ms |"
        )
    model_config = ModelConfig(threads=threads, context_length=4096, prefix_cache=False)
    config = HostConfig(
        cache_dir=cache_dir, models=dict.fromkeys(GENERATIVE_MODELS, model_config), compile_strategy="optimized"
    )
    commands = {language: command for language, (command, _) in built.items()}
    decode_rows = []
    for model in GENERATIVE_MODELS:
        for language, (speed, ratio) in _decode_ratios(config, commands, model).items():
            decode_rows.append(f"| {model} | {language} | {speed:.1f} | **{ratio:.3f}** |")
    return [
        HEADING,
        "",
        "The same programs built from Python with componentize-py and from JavaScript with componentize-js: the "
        "benchmark guest (a `command` making one greedy `infer` call, timed inside the guest) and a trivial "
        '`http-app` handler answering "ok" without the LLM. Compile: wasmtime compiling the component from its '
        "bytes, as the first `llmhost run` or `llmhost serve` of it does (cached afterwards): Cranelift "
        '(`compile-strategy = "optimized"`) and Winch (fast-first\'s first step). Per request: what `llmhost '
        "serve` does for every request, a fresh store and instance, then the whole in-process `handle` call, p50 "
        "of 50.",
        "",
        "| guest | command component | http-app component | compile, Cranelift | compile, Winch "
        "| new store + instance | whole `handle` call |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"`infer` decode: {ROUNDS} interleaved rounds of the bare llama_decode loop and each guest's greedy `infer` "
        "of the same prompt and length (run.py's PROMPT and TOKENS), medians.",
        "",
        "| model | guest | tokens/s | ÷ bare loop |",
        "| --- | --- | ---: | ---: |",
        *decode_rows,
        "",
    ]


def main() -> int:
    lines = run(HostConfig().cache_dir, 2)
    print("\n".join(lines))
    replace_section(HEADING, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
