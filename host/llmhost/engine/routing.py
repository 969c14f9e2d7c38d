"""One host, several backends: each model's calls go to the engine its config picked (`models.NAME.backend`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from llmhost.domain.errors import ModelNotSupported
from llmhost.domain.types import EmbeddingsResult, InferenceResult, InferencingParams, ModelInfo
from llmhost.engine.base import Engine, Generation, TokenSequence

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo


class RoutingEngine:
    """The engine protocol over per-model engines (e.g. local llama.cpp models beside remote ones)."""

    def __init__(self, engines: Mapping[str, Engine], order: list[str]) -> None:
        self._engines = dict(engines)  # model name -> its engine (one engine object may serve many models)
        self._order = order

    def backend(self, model: str) -> Engine:
        engine = self._engines.get(model)
        if engine is None:
            raise ModelNotSupported(
                f"model {model!r} is not configured; known models: {', '.join(self._order)} "
                "(add it under [models] in the config)"
            )
        return engine

    def model(self, name: str) -> Any:
        """The backend's own model object (tests and benchmarks read llama.cpp models' counters through it)."""
        return self.backend(name).model(name)  # type: ignore[attr-defined]

    def model_names(self) -> list[str]:
        return list(self._order)

    def list_models(self) -> list[ModelInfo]:
        infos: dict[str, ModelInfo] = {}
        for engine in self._distinct():
            infos.update((info.name, info) for info in engine.list_models())
        return [infos[name] for name in self._order if name in infos]

    def model_info(self, model: str) -> ModelInfo:
        return self.backend(model).model_info(model)

    def tokenize(self, model: str, text: str) -> list[int]:
        return self.backend(model).tokenize(model, text)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> Generation:
        return self.backend(model).stream(model, prompt, params)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return self.backend(model).infer(model, prompt, params)

    def embeddings(self, model: str, texts: list[str], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        return self.backend(model).embeddings(model, texts, check)

    def open_sequence(self, model: str) -> TokenSequence:
        return self.backend(model).open_sequence(model)

    def chat_template(self, model: str) -> TemplateInfo:
        return self.backend(model).chat_template(model)

    def close(self) -> None:
        for engine in self._distinct():
            engine.close()

    def _distinct(self) -> list[Engine]:
        seen: dict[int, Engine] = {}
        for engine in self._engines.values():
            seen.setdefault(id(engine), engine)
        return list(seen.values())
