"""`RayEngine`: the engine protocol for `backend = "ray"` models, over each model's Ray Serve deployment handle."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from llmhost.config import ClusterConfig, EngineConfig, ModelConfig
from llmhost.domain.types import EmbeddingInput, EmbeddingsResult, InferenceResult, InferencingParams, ModelInfo
from llmhost.engine.base import collect, configured
from llmhost.engine.ray.calls import RayGeneration
from llmhost.engine.ray.cluster import connect
from llmhost.engine.ray.deploy import deploy_or_attach
from llmhost.engine.ray.model import RayModel
from llmhost.engine.ray.sequence import RaySequence

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo


class RayEngine:
    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        cluster: ClusterConfig,
        engine: EngineConfig,
        note: Callable[[str], None] | None = None,
    ) -> None:
        connect(cluster)
        self._models: dict[str, RayModel] = {}
        for name, config in models.items():
            if note is not None:
                note(f"model {name}: on the Ray cluster at {cluster.ray_address}")
            handle = deploy_or_attach(name, config, engine, cluster.connect_timeout_s)
            self._models[name] = RayModel(name, config, handle)
        self._infos: dict[str, ModelInfo] = {}
        self._templates: dict[str, TemplateInfo] = {}

    def model(self, name: str) -> RayModel:
        return configured(self._models, name)

    def model_names(self) -> list[str]:
        return list(self._models)

    def list_models(self) -> list[ModelInfo]:
        return [self.model_info(name) for name in self._models]

    def model_info(self, model: str) -> ModelInfo:
        info = self._infos.get(model)
        if info is None:
            info = self._infos[model] = self.model(model).engine_call("model_info")
        return info

    def tokenize(self, model: str, text: str) -> list[int]:
        tokens: list[int] = self.model(model).engine_call("tokenize", text)
        return tokens

    def stream(self, model: str, prompt: str, params: InferencingParams) -> RayGeneration:
        m = self.model(model)
        return RayGeneration(model, lambda _: m.streaming.stream.remote(prompt, params, affinity=m.affinity(prompt)))

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(
        self, model: str, texts: Sequence[EmbeddingInput], check: Callable[[], None] | None = None
    ) -> EmbeddingsResult:
        result: EmbeddingsResult = self.model(model).engine_call("embeddings", list(texts), check=check)
        return result

    def open_sequence(self, model: str) -> RaySequence:
        return RaySequence.open(self.model(model))

    def chat_template(self, model: str) -> TemplateInfo:
        template = self._templates.get(model)
        if template is None:
            template = self._templates[model] = self.model(model).engine_call("chat_template")
        return template

    def close(self) -> None:
        """The deployments stay: they outlive this host, and other hosts may share them."""
        self._models.clear()
