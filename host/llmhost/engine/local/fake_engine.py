"""`[engine] kind = "fake-decoder"`: the local engine over `FakeDecoder` (no model file), so that hosts, Ray replicas
and benchmarks run the real scheduler, slots and sequences without loading llama.cpp."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from llmhost.config import FakeDecoderEngineConfig, ModelConfig
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel


def fake_decoder_engine(models: Mapping[str, ModelConfig], engine: FakeDecoderEngineConfig) -> LlamaCppEngine:
    def load(name: str, config: ModelConfig) -> EngineModel:
        n_ctx = engine.context_length
        decoder = FakeDecoder(
            n_ctx=n_ctx, n_batch=min(config.batch_size, n_ctx), n_slots=config.slots, step_s=engine.step_ms / 1000
        )
        sized = config.model_copy(update={"context_length": n_ctx, "batch_size": decoder.n_batch})
        return EngineModel(name, sized, decoder)

    return LlamaCppEngine(dict(models), Path("/nonexistent"), load=load)
