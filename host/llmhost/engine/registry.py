"""Build the engine a config asks for (the discriminated union `HostConfig.engine`)."""

from __future__ import annotations

from collections.abc import Callable

from ..config import FakeEngineConfig, HostConfig
from .base import Engine


def create_engine(config: HostConfig, note: Callable[[str], None] | None = None) -> Engine:
    """`note` gets progress messages (loading a model takes a second or more)."""
    if isinstance(config.engine, FakeEngineConfig):
        from .fake import FakeEngine

        return FakeEngine(
            models=tuple(config.models),
            script=config.engine.script,
            context_length=config.engine.context_length,
        )
    # Imported here so that `llmhost --help` and unit tests never load llama.cpp.
    from .llamacpp import LlamaCppEngine

    return LlamaCppEngine(config.models, cache_dir=config.cache_dir, note=note)
