"""The engine of a host's local models (`backend = "llama-cpp"`), by `[engine] kind`: llama.cpp, the fake, or the
local engine over the fake decoder. The registry and Ray's replicas both build theirs here."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from llmhost.config import FakeDecoderEngineConfig, FakeEngineConfig, HostConfig, ModelConfig
from llmhost.engine.base import Engine
from llmhost.engine.observer import Observers, no_observers


def local_engine(
    config: HostConfig,
    models: Mapping[str, ModelConfig],
    note: Callable[[str], None] | None,
    observers: Observers = no_observers,
) -> Engine:
    if isinstance(config.engine, FakeDecoderEngineConfig):
        from llmhost.engine.local.fake_engine import fake_decoder_engine

        return fake_decoder_engine(models, config.engine)
    if isinstance(config.engine, FakeEngineConfig):
        from llmhost.engine.fake import FakeEngine

        return FakeEngine(
            models=tuple(models),
            script=config.engine.script,
            context_length=config.engine.context_length,
        )
    # Imported here so that `llmhost --help` and unit tests never load llama.cpp.
    from llmhost.engine.local.engine import LlamaCppEngine

    return LlamaCppEngine(
        {name: config.models[name] for name in models},
        cache_dir=config.cache_dir,
        note=note,
        observers=observers,
        memory_budget_mb=config.engine.memory_budget_mb,
    )
