"""Build the engine a config asks for: the discriminated union `HostConfig.engine` for local models, and each
model's `backend` (remote models go to the OpenAI-compatible backend; a mix is routed per model)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from llmhost.config import FakeEngineConfig, HostConfig, ModelConfig
from llmhost.engine.base import Engine


def create_engine(config: HostConfig, note: Callable[[str], None] | None = None) -> Engine:
    """`note` gets progress messages (loading a model takes a second or more)."""
    local = {name: m for name, m in config.models.items() if m.backend == "llama-cpp"}
    remote = {name: m for name, m in config.models.items() if m.backend == "openai"}
    engine = _local_engine(config, local, note) if local or not remote else None
    if not remote:
        assert engine is not None
        return engine
    # Imported here: a host with only local models never loads the HTTP client.
    from llmhost.engine.remote.engine import OpenAIEngine
    from llmhost.engine.routing import RoutingEngine

    remote_engine = OpenAIEngine(remote, cache_dir=config.cache_dir, note=note)
    if engine is None:
        return remote_engine
    routes: dict[str, Engine] = {name: engine for name in local}
    routes.update({name: remote_engine for name in remote})
    return RoutingEngine(routes, list(config.models))


def _local_engine(config: HostConfig, models: Mapping[str, ModelConfig], note: Callable[[str], None] | None) -> Engine:
    if isinstance(config.engine, FakeEngineConfig):
        from llmhost.engine.fake import FakeEngine

        return FakeEngine(
            models=tuple(models),
            script=config.engine.script,
            context_length=config.engine.context_length,
        )
    # Imported here so that `llmhost --help` and unit tests never load llama.cpp.
    from llmhost.engine.local.engine import LlamaCppEngine

    return LlamaCppEngine({name: config.models[name] for name in models}, cache_dir=config.cache_dir, note=note)
