"""Remote backend benchmark: a guest calling `llm.infer` on a model served by llama-cpp-python's OpenAI-compatible
server (through llmhost's openai backend) ÷ the official `openai` client calling the same server directly, same
prompt, greedy, same length. Single requests (median of ROUNDS interleaved rounds, guest-timed vs client-timed)
and 8 concurrent (aggregate tok/s over the batch's wall time, median of CONCURRENT_ROUNDS).

`run(...)` returns markdown rows of one model for docs/benchmarks.md (bench/run.py, once per built-in model);
`python bench/scaleout.py` runs only this, for each built-in model.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from llmhost import Host, HostConfig
from llmhost.config import ModelConfig
from llmhost.toolchains.python import build_component

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Once upon a time, there was a dragon who"
TOKENS = 64
ROUNDS = 5
CONCURRENT = 8
CONCURRENT_ROUNDS = 2


def start_server(model_path: Path, alias: str, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1"]
    command += [
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        str(threads),
        "--model_alias",
        alias,
        "--interrupt_requests",
        "false",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(400):
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not start")


def _direct(client: Any, alias: str) -> tuple[int, float]:
    started = time.perf_counter()
    # The same request body the backend sends for the guest's greedy params (bench/guest: top-k 0, penalty 1).
    result = client.completions.create(
        model=alias,
        prompt=PROMPT,
        max_tokens=TOKENS,
        temperature=0.0,
        top_p=1.0,
        extra_body={"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0},
    )
    return int(result.usage.completion_tokens), time.perf_counter() - started


def _direct_streamed(client: Any, alias: str) -> tuple[int, float]:
    """The same request streamed, as the backend sends it (llama-cpp-python's server costs more per token when
    streaming: one SSE event per token through its thread pool)."""
    started = time.perf_counter()
    stream = client.completions.create(
        model=alias,
        prompt=PROMPT,
        max_tokens=TOKENS,
        temperature=0.0,
        top_p=1.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0},
    )
    chunks = sum(1 for c in stream if c.choices and c.choices[0].text)
    return chunks, time.perf_counter() - started


def run(cache_dir: Path, model_path: Path, model: str, threads: int = 2) -> list[str]:
    """The remote backend against `model`'s GGUF (`model_path`) served by llama-cpp-python."""
    from openai import OpenAI

    remote_name = f"{model}-remote"  # the host's name for it; the server's is `model`
    proc, url = start_server(model_path, model, threads)
    try:
        wasm = cache_dir / "bench" / "bench-guest.wasm"
        build_component(ROOT / "bench" / "guest", wasm, cache_dir=cache_dir)
        remote = ModelConfig(
            backend="openai",
            base_urls=(url,),
            remote_model=model,
            server="llama-cpp-python",
            path=model_path,
            slots=8,
        )
        client = OpenAI(base_url=url, api_key="none", max_retries=0)
        with Host(HostConfig(models={remote_name: remote}, cache_dir=cache_dir)) as host:
            app = host.load(wasm)

            def guest() -> tuple[int, float]:
                done = app.run_captured(["infer", remote_name, str(TOKENS), PROMPT])
                report = json.loads(done.stdout.decode().strip().splitlines()[-1])
                return int(report["generated"]), float(report["seconds"])

            def concurrent(one: Any) -> float:
                started = time.perf_counter()
                with ThreadPoolExecutor(CONCURRENT) as pool:
                    counts = list(pool.map(lambda _: one()[0], range(CONCURRENT)))
                return sum(counts) / (time.perf_counter() - started)

            guest(), _direct(client, model)  # warm up: compile, the vocabulary, the server's first request
            via_guest: list[float] = []
            direct: list[float] = []
            streamed: list[float] = []
            for i in range(ROUNDS):  # interleaved, the order alternating
                order = [
                    (via_guest, guest),
                    (direct, lambda: _direct(client, model)),
                    (streamed, lambda: _direct_streamed(client, model)),
                ]
                for rates, one in order if i % 2 == 0 else order[::-1]:
                    n, seconds = one()
                    rates.append(n / seconds)
            many_guest, many_direct = [], []
            for _ in range(CONCURRENT_ROUNDS):
                many_guest.append(concurrent(guest))
                many_direct.append(concurrent(lambda: _direct(client, model)))
    finally:
        proc.terminate()
        proc.wait(30)
    single = statistics.median(via_guest) / statistics.median(direct)
    many = statistics.median(many_guest) / statistics.median(many_direct)
    return [
        f"Greedy, {TOKENS} tokens, prompt {PROMPT!r}, against llama-cpp-python's server (`python -m llama_cpp.server`, "
        f"{threads} threads, same GGUF) on loopback; single: median of {ROUNDS} interleaved rounds; concurrent: "
        f"{CONCURRENT} requests at once, aggregate tok/s, median of {CONCURRENT_ROUNDS} rounds (that server runs "
        "one request at a time, so both sides queue alike).",
        "",
        "| measure | value | target |",
        "| --- | ---: | ---: |",
        f"| guest `infer` via the openai backend ÷ `openai` client direct, tok/s ({statistics.median(via_guest):.1f} "
        f"÷ {statistics.median(direct):.1f}) | **{single:.3f}** ({'met' if single >= 0.95 else 'NOT met'}) | ≥ 0.95 |",
        f"| guest ÷ the client direct with `stream=True` (the request the backend sends), tok/s "
        f"({statistics.median(via_guest):.1f} ÷ {statistics.median(streamed):.1f}) | "
        f"{statistics.median(via_guest) / statistics.median(streamed):.3f} | |",
        f"| {CONCURRENT} concurrent guests ÷ {CONCURRENT} concurrent direct, aggregate tok/s "
        f"({statistics.median(many_guest):.1f} ÷ {statistics.median(many_direct):.1f}) | **{many:.3f}** "
        f"({'met' if many >= 0.9 else 'NOT met'}) | ≥ 0.90 |",
    ]


def main() -> int:
    import os

    from llmhost.domain.limits import DEFAULT_MODEL, GENERATIVE_MODELS
    from llmhost.engine.local.models import default_model_path, smollm2_path

    cache = Path(os.environ.get("LLMHOST_CACHE_DIR") or Path(tempfile.gettempdir()) / "llmhost-bench")
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    for model in GENERATIVE_MODELS:
        path = default_model_path(cache) if model == DEFAULT_MODEL else smollm2_path(cache)
        print("\n".join([f"### {model}", "", *run(cache, path, model, threads), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
