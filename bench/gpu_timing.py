"""The GPU timing method of `bench/host_time.py --gpu` and `bench/gpu_speed.py --gpu` (issue 51).

On a GPU `llama_decode` can return before the step is computed: the wait then shows up wherever the result is
first read (the logits, a sampled token), and the host looks slower than it is. So the timed decode calls
`llama_synchronize(ctx)` right after `llama_decode`, inside the timed region: the decode's time is the step's, and
wall time minus it is the host's. On a CPU-only build the decode is synchronous and the synchronize costs nothing,
so the same command runs (and prints the same table) here.

The models are the host config's (LLMHOST_CONFIG, else the built-in ones): every generative llama.cpp model, with
every layer offloaded (`n-gpu-layers = -1`; a CPU-only build ignores it).
"""

from __future__ import annotations

import os
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmhost import HostConfig
from llmhost.config import ModelConfig, load_config
from llmhost.domain.limits import MINILM_MODEL


def configured(threads: int, **overrides: Any) -> tuple[HostConfig, dict[str, ModelConfig]]:
    """The host config and its generative llama.cpp models, offloaded, `threads` llama.cpp threads, `overrides`
    (other `ModelConfig` fields) applied; a model's other keys (path, backend-sampling, ...) are kept."""
    path = os.environ.get("LLMHOST_CONFIG")
    config = load_config(path) if path else HostConfig()
    update = {"n_gpu_layers": -1, "threads": threads, **overrides}
    models = {
        name: model.model_copy(update=update)
        for name, model in config.models.items()
        if model.backend == "llama-cpp" and not model.embeddings_only and name != MINILM_MODEL
    }
    return config, models


def synchronized_lib(real: Any, add: Callable[[float, int], None]) -> Any:
    """The llama_cpp module with `llama_decode` timed, `llama_synchronize` inside the timed region; `add(seconds,
    tokens)` gets each call's time and tokens. A module copy, as bench/gpu_speed.py's simulation makes."""

    def llama_decode(ctx: Any, batch: Any) -> int:
        started = time.perf_counter()
        rc = int(real.llama_decode(ctx, batch))
        real.llama_synchronize(ctx)
        add(time.perf_counter() - started, int(batch.n_tokens))
        return rc

    proxy = types.ModuleType(real.__name__)
    proxy.__dict__.update(vars(real))
    proxy.llama_decode = llama_decode  # type: ignore[attr-defined]
    return proxy


def describe(cache_dir: Path) -> str:
    """One line on what ran: llama.cpp's build and the config the models came from."""
    from llmhost.engine.local.llama_decoder import llama_lib

    lib = llama_lib()
    gpu = "a GPU build (layers offloaded)" if lib.llama_supports_gpu_offload() else "a CPU-only build (offload ignored)"
    import llama_cpp

    source = os.environ.get("LLMHOST_CONFIG") or "the built-in ones (no LLMHOST_CONFIG)"
    return f"llama-cpp-python {llama_cpp.__version__}, {gpu}; models: {source}; cache {cache_dir}."
