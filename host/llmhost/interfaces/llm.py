"""The host side of the WIT interface `llmhost:llm/llm@0.1.0` (wit/llm.wit)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, ResourceType

from .. import abi, policy
from ..engine.base import Engine, Generation, TokenSequence
from ..runtime.host_funcs import add_func
from ..types import EmbeddingsResult, InferenceResult, InferencingParams, ModelInfo, ModelNotSupported
from .streams import StreamTable

_log = logging.getLogger(__name__)

INTERFACE = "llmhost:llm/llm@0.1.0"

# Host resource type ids (any distinct integers; wasmtime checks a handle's type against them).
STREAM_TYPE_ID = 1

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

    def infer_stream(self, model: str, prompt: str, params: InferencingParams) -> Generation:
        """Validate and start a generation; input errors are raised here, before any token is generated."""
        self._check_allowed(model)
        policy.validate_params(params)
        return self._engine().stream(model, prompt, params)

    def open_sequence(self, model: str) -> TokenSequence:
        self._check_allowed(model)
        return self._engine().open_sequence(model)

    def tokenize(self, model: str, text: str) -> list[int]:
        self._check_allowed(model)
        return self._engine().tokenize(model, text)

    def model_info(self, model: str) -> ModelInfo:
        self._check_allowed(model)
        return self._engine().model_info(model)

    def embeddings(self, model: str, texts: list[str]) -> EmbeddingsResult:
        self._check_allowed(model)
        return self._engine().embeddings(model, texts)


def define_llm(
    instance: LinkerInstance, service: LlmService, streams: StreamTable, imported: dict[str, FuncType]
) -> None:
    """Register the functions a component imports, typed by its own WIT import types (see `abi.ResultEncoder`).

    A function the component imports but this host does not know is left undefined: instantiation then fails
    with wasmtime's message naming it.
    """

    def open_stream(model: str, prompt: str, params: Any) -> int:
        return streams.open(service.infer_stream(model, prompt, abi.params_from_wit(params)))

    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "infer": (
            lambda model, prompt, params: service.infer(model, prompt, abi.params_from_wit(params)),
            abi.inference_result_to_wit,
        ),
        "tokenize": (service.tokenize, abi.tokens_to_wit),
        "get-model-info": (service.model_info, abi.model_info_to_wit),
        "generate-embeddings": (service.embeddings, abi.embeddings_to_wit),
        "infer-stream": (
            lambda model, prompt, params: streams.open(
                service.infer_stream(model, prompt, abi.params_from_wit(params))
            ),
            lambda rep: abi.own_resource(rep, STREAM_TYPE_ID),
        ),
    }
    methods: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "[method]inference-stream.next": (
            lambda store, this: streams.next(abi.resource_rep(store, this)),
            abi.stream_event_to_wit,
        ),
    }
    if "infer-stream" in imported or "[method]inference-stream.next" in imported:
        instance.add_resource("inference-stream", ResourceType.host(STREAM_TYPE_ID), _stream_dropped(streams))
    for name, func_type in imported.items():
        encoder = abi.ResultEncoder.from_wit(func_type.result) if name in bindings or name in methods else None
        if name in bindings and encoder is not None:
            function, to_wit = bindings[name]
            add_func(instance, name, abi.guarded(function, to_wit, encoder), func_type)
        elif name in methods and encoder is not None:
            function, to_wit = methods[name]
            add_func(instance, name, abi.guarded(function, to_wit, encoder, with_store=True), func_type)


def _stream_dropped(streams: StreamTable) -> Callable[[Any, int], None]:
    def destructor(_store: Any, rep: int) -> None:
        # Runs when the guest drops its handle; like any host function it must not raise.
        try:
            streams.drop(rep)
        except Exception:  # a failure to cancel must not trap the guest that dropped the stream
            _log.exception("cancelling stream %d failed", rep)

    return destructor
