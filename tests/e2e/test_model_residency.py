"""Models load on demand and unload when idle, with the real SmolLM2 through llama.cpp and the Python API: an idle
model unloads after its keep-alive and the process's resident memory drops by about its footprint; the next
requests, four at once, load it once again and give the same greedy output as before."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from llmhost.api import Host
from llmhost.config import HostConfig, ModelConfig
from llmhost.domain.types import InferencingParams
from llmhost.engine.local.engine import LlamaCppEngine

pytestmark = [pytest.mark.model]
MODEL = "smollm2-135m"
PROMPT = "The capital of France is"
GREEDY = InferencingParams(max_tokens=8, temperature=0.0)
KEEP_ALIVE_S = 0.5
UNLOAD_TIMEOUT_S = 20.0


def rss_bytes() -> int:
    """This process's resident set, from /proc (statm's second field, in pages)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def state(engine: LlamaCppEngine) -> str:
    return engine.residency()[0].state


def test_an_idle_model_unloads_frees_its_memory_and_reloads_once_with_the_same_output(llmhost_cache_dir: Path) -> None:
    config = HostConfig(
        cache_dir=llmhost_cache_dir,
        models={MODEL: ModelConfig(keep_alive_s=KEEP_ALIVE_S, context_length=1024, slots=2)},
    )
    with Host(config, note=lambda message: None) as host:
        engine = host.engine.engine(MODEL)
        assert isinstance(engine, LlamaCppEngine) and state(engine) == "unloaded"  # not loaded with the host
        first = host.infer(MODEL, PROMPT, GREEDY)
        loaded = rss_bytes()
        footprint = engine.residency()[0].bytes
        ends = time.monotonic() + UNLOAD_TIMEOUT_S
        while state(engine) != "unloaded" and time.monotonic() < ends:
            time.sleep(0.05)
        assert state(engine) == "unloaded"
        dropped = loaded - rss_bytes()
        # The file's pages (mapped) and the KV cache go back to the system: about the footprint (an estimate).
        assert 0.6 * footprint <= dropped <= 1.4 * footprint, (dropped, footprint)

        outputs: list[tuple[str, str]] = []

        def request() -> None:
            result = host.infer(MODEL, PROMPT, GREEDY)
            outputs.append((result.text, result.finish_reason))

        threads = [threading.Thread(target=request) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=UNLOAD_TIMEOUT_S)
        assert outputs == [(first.text, first.finish_reason)] * 4  # greedy: the same as before the unload
        assert engine.residency()[0].loads == 2  # four first requests, one load
