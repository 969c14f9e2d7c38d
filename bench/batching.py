"""Continuous batching benchmark (part of `make bench`): aggregate decode throughput at 1, 2, 4, 8 concurrent
streams through the llmhost engine, against a serialized baseline (the same requests one at a time) and a bare
llama.cpp loop that decodes the same number of sequences in one batch per step (the ceiling). `run` measures one
model (bench/run.py calls it for each built-in model, each in a fresh process)."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.engine.local.llama_decoder import llama_lib

LEVELS = (1, 2, 4, 8)
ROUNDS = 3
TOKENS = 128
SUBJECTS = ["dragon", "cat", "king", "robot", "wizard", "fox", "ship", "tree"]


def prompts(n: int, tag: str) -> list[str]:
    return [f"{tag} {i}: Once upon a time, there was a {SUBJECTS[i % len(SUBJECTS)]} who" for i in range(n)]


def bare_batched(model_path: Path, threads: int, n_gpu_layers: int, n: int) -> float:
    """Tokens/s of n sequences decoded greedily in one llama_decode per step, nothing else around it."""
    lib = llama_lib()
    mparams = lib.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 2**31 - 1
    mparams.use_extra_bufts = False  # as the engine runs by default (exact-batching)
    model = lib.llama_model_load_from_file(str(model_path).encode(), mparams)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 1024 * n, 512, 512
    cparams.n_seq_max, cparams.kv_unified = n, True
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = lib.llama_init_from_model(model, cparams)
    vocab = lib.llama_model_get_vocab(model)
    batch = lib.llama_batch_init(512, 0, 1)
    samplers = []
    for _ in range(n):
        s = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        lib.llama_sampler_chain_add(s, lib.llama_sampler_init_greedy())
        samplers.append(s)
    positions, last = [], []
    for seq, text in enumerate(prompts(n, "Bare")):
        data = text.encode()
        buf = (lib.llama_token * (len(data) + 8))()
        count = lib.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
        for i in range(count):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = buf[i], i, 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = int(i == count - 1)
        batch.n_tokens = count
        lib.llama_decode(ctx, batch)
        last.append(lib.llama_sampler_sample(samplers[seq], ctx, -1))
        positions.append(count)
    start = time.perf_counter()
    for _ in range(TOKENS - 1):
        for seq in range(n):
            batch.token[seq], batch.pos[seq], batch.n_seq_id[seq] = last[seq], positions[seq], 1
            batch.seq_id[seq][0] = seq
            batch.logits[seq] = 1
            positions[seq] += 1
        batch.n_tokens = n
        lib.llama_decode(ctx, batch)
        last = [lib.llama_sampler_sample(samplers[seq], ctx, seq) for seq in range(n)]
    elapsed = time.perf_counter() - start
    for s in samplers:
        lib.llama_sampler_free(s)
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)
    return n * (TOKENS - 1) / elapsed


GREEDY = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0)


def engine_concurrent(host: Host, model: str, n: int, tag: str) -> tuple[float, list[float]]:
    """Aggregate tokens/s of n concurrent streams, and each stream's time to first token."""
    firsts: list[float] = []
    counts: list[int] = []
    lock = threading.Lock()

    def one(prompt: str) -> None:
        start = time.perf_counter()
        first = None
        generated = 0
        for event in host.infer_stream(model, prompt, GREEDY):
            if isinstance(event, StreamChunk):
                if first is None:
                    first = time.perf_counter() - start
            else:
                generated = event.usage.generated_token_count
        with lock:
            firsts.append(first or 0.0)
            counts.append(generated)

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts(n, tag)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start), firsts


def serialized(host: Host, model: str, n: int, tag: str) -> float:
    start = time.perf_counter()
    total = sum(host.infer(model, p, GREEDY).usage.generated_token_count for p in prompts(n, tag))
    return total / (time.perf_counter() - start)


def serve_http(host_config: HostConfig, model: str, threads: int, n_gpu_layers: int) -> dict[int, float]:
    """Aggregate tokens/s of n concurrent `/v1/completions` requests to guest-examples/openai-compat served by
    `llmhost serve` over loopback HTTP (each request a fresh guest instance calling `llm.infer`)."""
    import tempfile

    from serve import completion_tokens, start_server

    from llmhost.toolchains.python import build_component

    root = Path(__file__).resolve().parents[1]
    wasm = build_component(
        root / "guest-examples" / "openai-compat",
        host_config.cache_dir / "bench" / "openai-compat.wasm",
        world="http-app",
        cache_dir=host_config.cache_dir,
    )
    config = Path(tempfile.mkdtemp()) / "serve.toml"
    config.write_text(
        f"[models.{model}]\nslots = {max(LEVELS)}\ncontext-length = 1024\nthreads = {threads}\n"
        f"n-gpu-layers = {n_gpu_layers}\nprefix-cache = false\n\n[limits]\nmax-tokens = {TOKENS}\n"
        # a bench request queues behind the others at 8 streams; on a VM short of CPU it may take minutes
        "deadline-s = 600\n"
    )
    process, port = start_server(wasm, host_config.cache_dir, config)

    def request(prompt: str) -> int:
        return completion_tokens(port, {"model": model, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0})

    rates: dict[int, float] = {}
    try:
        request("warm up")
        for n in LEVELS:
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=n) as pool:
                generated = sum(pool.map(request, prompts(n, f"Http{n}")))
            rates[n] = generated / (time.perf_counter() - start)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return rates


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(config: HostConfig, model_path: Path, model: str, threads: int, n_gpu_layers: int) -> list[str]:
    slots = max(LEVELS)
    cfg = config.model_copy(
        update={
            "models": {
                model: ModelConfig(
                    threads=threads, n_gpu_layers=n_gpu_layers, slots=slots, context_length=1024, prefix_cache=False
                )
            }
        }
    )
    rows: list[str] = []
    with Host(cfg) as host:
        host.infer(model, "warm up", InferencingParams(max_tokens=4))
        results: dict[int, dict[str, Any]] = {}
        for n in LEVELS:
            # The engine and the bare loop interleaved, ROUNDS times: one measurement of each swung by ±15 % on this
            # machine. A fresh tag per measurement: no prompt prefix is reused from an earlier one.
            rates, bares, firsts = [], [], []
            for r in range(ROUNDS):
                rate, ttft = engine_concurrent(host, model, n, f"Streams{n}r{r}")
                rates.append(rate)
                firsts.extend(ttft)
                bares.append(bare_batched(model_path, threads, n_gpu_layers, n))
            results[n] = {
                "rate": statistics.median(rates),
                "ttft": firsts,
                "serial": serialized(host, model, n, f"Serial{n}"),
                "bare": statistics.median(bares),
                "ratio": statistics.median(a / b for a, b in zip(rates, bares, strict=True)),
            }
    http_rates = serve_http(config, model, threads, n_gpu_layers)
    one = results[1]["rate"]
    rows += [
        "| streams | llmhost tok/s | ÷ 1 stream | TTFT p50 | TTFT p95 | serialized tok/s | llmhost ÷ serialized "
        "| bare batched loop tok/s | llmhost ÷ bare | over HTTP (`llmhost serve`) tok/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, res in results.items():
        rows.append(
            f"| {n} | {res['rate']:.1f} | {res['rate'] / one:.2f} | {pct(res['ttft'], 0.5) * 1000:.0f} ms | "
            f"{pct(res['ttft'], 0.95) * 1000:.0f} ms | {res['serial']:.1f} | {res['rate'] / res['serial']:.2f} | "
            f"{res['bare']:.1f} | {res['ratio']:.2f} | {http_rates[n]:.1f} |"
        )
    eight = results[max(LEVELS)]
    rows += [
        "",
        f"Targets at {max(LEVELS)} streams: ≥ 0.9 × the bare batched loop (median of {ROUNDS} interleaved rounds' "
        f"ratios): **{eight['ratio']:.2f}**; "
        f"serialized baseline beaten ≥ 2×: **{eight['rate'] / eight['serial']:.2f}×**.",
    ]
    return rows
