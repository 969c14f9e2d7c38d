"""The host side of the WIT interface `llmhost:llm/llm@0.1.0` (wit/llm.wit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance

from .. import abi, policy
from ..engine.base import Engine
from ..types import EmbeddingsResult, InferenceResult, InferencingParams, ModelInfo, ModelNotSupported

INTERFACE = "llmhost:llm/llm@0.1.0"

# The config key that grants models to a component (named in the refusal so an operator knows what to change).
ALLOWED_MODELS_KEY = "allowed-models"


class LlmService:
    """The interface's functions on domain types, shared by guests and the Python API.

    `engine` is a factory so that the (slow) engine is created only when a model is first used. Each function
    raises `LlmError` for expected failures; `define_llm` turns those into WIT `err` values.
    """

    def __init__(self, engine: Callable[[], Engine], allowed_models: frozenset[str] | None = None) -> None:
        self._engine = engine
        self._allowed_models = allowed_models

    def restricted_to(self, allowed_models: frozenset[str] | None) -> LlmService:
        """The same engine, serving only `allowed_models` (None: every configured model)."""
        return LlmService(self._engine, allowed_models)

    def _check_allowed(self, model: str) -> None:
        if self._allowed_models is not None and model not in self._allowed_models:
            allowed = ", ".join(sorted(self._allowed_models)) or "none"
            raise ModelNotSupported(
                f"model {model!r} is not allowed for this component (allowed: {allowed}); "
                f"add it to `{ALLOWED_MODELS_KEY}` in the config"
            )

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        self._check_allowed(model)
        policy.validate_params(params)
        return self._engine().infer(model, prompt, params)

    def tokenize(self, model: str, text: str) -> list[int]:
        self._check_allowed(model)
        return self._engine().tokenize(model, text)

    def model_info(self, model: str) -> ModelInfo:
        self._check_allowed(model)
        return self._engine().model_info(model)

    def embeddings(self, model: str, texts: list[str]) -> EmbeddingsResult:
        self._check_allowed(model)
        return self._engine().embeddings(model, texts)


def define_llm(instance: LinkerInstance, service: LlmService, imported: dict[str, FuncType]) -> None:
    """Register the functions a component imports, typed by its own WIT import types (see `abi.ResultEncoder`).

    A function the component imports but this host does not know is left undefined: instantiation then fails
    with wasmtime's message naming it.
    """
    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "infer": (
            lambda model, prompt, params: service.infer(model, prompt, abi.params_from_wit(params)),
            abi.inference_result_to_wit,
        ),
        "tokenize": (service.tokenize, abi.tokens_to_wit),
        "get-model-info": (service.model_info, abi.model_info_to_wit),
        "generate-embeddings": (service.embeddings, abi.embeddings_to_wit),
    }
    for name, func_type in imported.items():
        if name in bindings:
            function, to_wit = bindings[name]
            instance.add_func(name, abi.guarded(function, to_wit, abi.ResultEncoder.from_wit(func_type.result)))
