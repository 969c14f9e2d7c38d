"""Each model's engine, resolved once: the backend its config picked (`models.NAME.backend`), for the local models
the discriminated union `HostConfig.engine` (llama.cpp or the fake). Callers take a model's engine from the
registry and call it directly; nothing forwards calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmhost.config import FakeEngineConfig, HostConfig, ModelConfig, alias_map
from llmhost.domain.kinds import ModelKind
from llmhost.domain.types import ModelInfo
from llmhost.engine.base import Engine, configured
from llmhost.engine.hub import model_file
from llmhost.engine.kinds import FileFacts, file_facts
from llmhost.engine.local_engines import local_engine
from llmhost.engine.observer import Observers, no_observers


class Registry:
    """Model name → the engine that serves it (one engine object may serve many models), in config order; and each
    alias (`models.NAME.aliases`) → its model's name."""

    def __init__(
        self,
        engines: Mapping[str, Engine],
        order: list[str] | None = None,
        aliases: Mapping[str, str] | None = None,
        configs: Mapping[str, ModelConfig] | None = None,
    ) -> None:
        self._engines = dict(engines)
        self._order = order if order is not None else list(engines)
        self._aliases = dict(aliases or {})
        self._configs = dict(configs or {})  # for each model's kind (a model without one: the defaults)
        self._facts: dict[str, FileFacts] = {}

    @classmethod
    def of(cls, engine: Engine) -> Registry:
        """Every model of one engine (an engine passed to `Host` by its caller)."""
        return cls(dict.fromkeys(engine.model_names(), engine))

    def canonical(self, name: str) -> str:
        """The model `name` stands for: its model's name for an alias, else `name` itself (an unknown name too, so
        that the engine's `model-not-supported` names it). Engines know models by this name only."""
        return self._aliases.get(name, name)

    def engine(self, model: str) -> Engine:
        """The engine of `model`; `ModelNotSupported` naming the configured models when there is none."""
        return configured(self._engines, model)

    def model(self, name: str) -> Any:
        """The backend's own model object (tests and benchmarks read llama.cpp models' counters through it)."""
        return self.engine(name).model(name)  # type: ignore[attr-defined]

    def model_names(self) -> list[str]:
        return list(self._order)

    def facts(self, name: str) -> FileFacts:
        """The model's kind and file facts, read once (from constants or the GGUF's header, never loading it)."""
        found = self._facts.get(name)
        if found is None:
            config = self.config(name)
            found = self._facts[name] = file_facts(name, config, model_file(config))
        return found

    def kind(self, name: str) -> ModelKind:
        return self.facts(name).kind

    def config(self, name: str) -> ModelConfig:
        """The model's config (the defaults for a model of an engine passed in without one)."""
        return self._configs.get(name) or ModelConfig()

    def list_models(self) -> list[ModelInfo]:
        """Every configured model's facts, without loading any (0 for what is unknown until loaded)."""
        infos: dict[str, ModelInfo] = {}
        for engine in self._distinct():
            infos.update((info.name, info) for info in engine.list_models())
        return [infos[name] for name in self._order if name in infos]

    def close(self) -> None:
        for engine in self._distinct():
            engine.close()

    def _distinct(self) -> list[Engine]:
        seen: dict[int, Engine] = {}
        for engine in self._engines.values():
            seen.setdefault(id(engine), engine)
        return list(seen.values())


def create_registry(
    config: HostConfig, note: Callable[[str], None] | None = None, observers: Observers = no_observers
) -> Registry:
    """`note` gets progress messages (loading a model takes a second or more); `observers(name)` gives each local
    model's observer (metrics)."""
    if not isinstance(config.engine, FakeEngineConfig):
        from llmhost.engine.hub import resolve

        for name, model in config.models.items():
            if model.hf_repo is not None:
                resolve(name, model)  # refused at start when not downloaded, naming `llmhost pull`
    local = {name: m for name, m in config.models.items() if m.backend == "llama-cpp"}
    remote = {name: m for name, m in config.models.items() if m.backend == "openai"}
    on_ray = {name: m for name, m in config.models.items() if m.backend == "ray"}
    engines: dict[str, Engine] = {}
    if local or not (remote or on_ray):
        engine = local_engine(config, local, note, observers)
        engines.update(dict.fromkeys(engine.model_names(), engine))
    if remote:
        # Imported here: a host with only local models never loads the HTTP client.
        from llmhost.engine.remote.engine import OpenAIEngine

        engines.update(dict.fromkeys(remote, OpenAIEngine(remote, cache_dir=config.cache_dir, note=note)))
    if on_ray:
        # Imported here: Ray is an optional extra (`pip install llmhost[ray]`), loaded only by hosts that use it.
        from llmhost.engine.ray.engine import RayEngine

        engines.update(dict.fromkeys(on_ray, RayEngine(on_ray, config.cluster, config.engine, note=note)))
    aliases = {alias: name for alias, name in alias_map(config.models).items() if name in engines}
    order = [name for name in config.models if name in engines] or list(engines)
    return Registry(engines, order, aliases, config.models)
