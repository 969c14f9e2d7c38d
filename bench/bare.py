"""(a) of `make bench`: llama.cpp with nothing around it (the ceiling every variant is divided by), and the
settings every section shares."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from llmhost.engine.local.llama_decoder import llama_lib
from llmhost.engine.local.models import default_model_path, smollm2_path

MODEL = "gemma-3-270m"
PROMPT = "Once upon a time, there was a dragon who"
TOKENS = 128
THREADS = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
N_GPU_LAYERS = int(os.environ.get("LLMHOST_BENCH_N_GPU_LAYERS", "0"))
CONTEXT = 4096


def model_path(model: str, cache_dir: Path) -> Path:
    """The GGUF file of a built-in model (what the bare loops and llama-cpp-python load)."""
    return default_model_path(cache_dir) if model == MODEL else smollm2_path(cache_dir)


class Bare:
    """(a) llama.cpp with nothing around it: one context, decode one token per step, greedy. `repack`: let
    llama.cpp repack weights for its CPU kernels (its default; llmhost turns it off for exact batching)."""

    def __init__(self, model_path: Path, repack: bool = False) -> None:
        self.run, self.prefill = _bare_loop(model_path, repack)


def _bare_loop(model_path: Path, repack: bool) -> tuple[Callable[[], tuple[int, float]], Callable[[str], float]]:
    lib = llama_lib()
    mparams = lib.llama_model_default_params()
    mparams.n_gpu_layers = N_GPU_LAYERS if N_GPU_LAYERS >= 0 else 2**31 - 1
    mparams.use_extra_bufts = repack
    model = lib.llama_model_load_from_file(str(model_path).encode(), mparams)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch = CONTEXT, 512
    cparams.n_threads = cparams.n_threads_batch = THREADS
    ctx = lib.llama_init_from_model(model, cparams)
    vocab = lib.llama_model_get_vocab(model)

    def tokenize(text: str) -> list[int]:
        data = text.encode()
        buf = (lib.llama_token * (len(data) + 8))()
        n = lib.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
        return list(buf[:n])

    prompt = tokenize(PROMPT)
    n_prompt = len(prompt)
    batch = lib.llama_batch_init(512, 0, 1)
    sampler = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(sampler, lib.llama_sampler_init_greedy())

    def fill(tokens: list[int], start: int) -> None:
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = int(i == len(tokens) - 1)
        batch.n_tokens = len(tokens)

    def run() -> tuple[int, float]:
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        start = time.perf_counter()
        fill(prompt, 0)
        lib.llama_decode(ctx, batch)
        for step in range(TOKENS):
            tok = lib.llama_sampler_sample(sampler, ctx, -1)
            if step == TOKENS - 1:
                break
            fill([tok], n_prompt + step)
            lib.llama_decode(ctx, batch)
        return TOKENS, time.perf_counter() - start

    def prefill(text: str) -> float:
        """Seconds to evaluate `text` and sample the first token: the floor of any time to first token."""
        tokens = tokenize(text)
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        start = time.perf_counter()
        fill(tokens, 0)
        lib.llama_decode(ctx, batch)
        lib.llama_sampler_sample(sampler, ctx, -1)
        return time.perf_counter() - start

    return run, prefill
