"""The host side of the WIT interface `llmhost:llm/llm` (wit/llm.wit), every served version."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, ResourceType

from .. import abi, policy
from ..chat.service import ChatGeneration, ChatService, collect_chat
from ..engine.base import Engine, Generation, TokenSequence, collect
from ..runtime.host_funcs import add_func
from ..runtime.scope import RunScope, ScopedGeneration, ScopedSequence, scope_of
from ..types import (
    ChatMessage,
    ChatParams,
    ChatResult,
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    ModelInfo,
    ModelNotSupported,
    Tool,
)
from .streams import StreamTable
from .versions import current, interface_names

_log = logging.getLogger(__name__)

INTERFACES = interface_names("llm")
INTERFACE = current("llm")

# Host resource type ids (any distinct integers; wasmtime checks a handle's type against them).
STREAM_TYPE_ID = 1

# The config key that grants models to a component (named in the refusal so an operator knows what to change).
ALLOWED_MODELS_KEY = "allowed-models"


class LlmService:
    """The interface's functions on domain types, shared by guests and the Python API.

    `engine` is a factory so that the (slow) engine is created only when a model is first used. Each function
    raises `LlmError` for expected failures; `define_llm` turns those into WIT `err` values. Guest calls pass
    their run's `scope`: the run owns their generations (cancelled with it, counted into its token budget).
    """

    def __init__(
        self,
        engine: Callable[[], Engine],
        allowed_models: frozenset[str] | None = None,
        allowed_key: str = f"`{ALLOWED_MODELS_KEY}` in the config",
        chat: ChatService | None = None,
    ) -> None:
        self._engine = engine
        self._allowed_models = allowed_models
        self._allowed_key = allowed_key
        self._chat = chat if chat is not None else ChatService(engine)

    def restricted_to(self, allowed_models: frozenset[str] | None, key: str | None = None) -> LlmService:
        """The same engine, serving only `allowed_models` (None: every configured model); `key` names the config
        key that grants them, for the refusal."""
        return LlmService(self._engine, allowed_models, key or self._allowed_key, self._chat)

    def _check(self, model: str, scope: RunScope | None) -> None:
        if scope is not None:
            scope.check()
        if self._allowed_models is not None and model not in self._allowed_models:
            allowed = ", ".join(sorted(self._allowed_models)) or "none"
            raise ModelNotSupported(
                f"model {model!r} is not allowed for this component (allowed: {allowed}); add it to {self._allowed_key}"
            )

    def infer(
        self, model: str, prompt: str, params: InferencingParams, scope: RunScope | None = None
    ) -> InferenceResult:
        if scope is None:
            self._check(model, None)
            return self._engine().infer(model, prompt, params)
        return collect(self.infer_stream(model, prompt, params, scope))

    def infer_stream(
        self, model: str, prompt: str, params: InferencingParams, scope: RunScope | None = None
    ) -> Generation:
        """Validate and start a generation; input errors are raised here, before any token is generated."""
        self._check(model, scope)
        if scope is None:
            return self._engine().stream(model, prompt, params)
        return ScopedGeneration(self._engine().stream(model, prompt, scope.clamp(params)), scope)

    def open_sequence(self, model: str, scope: RunScope | None = None) -> TokenSequence:
        self._check(model, scope)
        sequence = self._engine().open_sequence(model)
        return sequence if scope is None else ScopedSequence(sequence, scope)

    def tokenize(self, model: str, text: str, scope: RunScope | None = None) -> list[int]:
        self._check(model, scope)
        return self._engine().tokenize(model, text)

    def model_info(self, model: str, scope: RunScope | None = None) -> ModelInfo:
        self._check(model, scope)
        return self._engine().model_info(model)

    def list_models(self) -> list[ModelInfo]:
        """The models this component may use."""
        allowed = self._allowed_models
        return [info for info in self._engine().list_models() if allowed is None or info.name in allowed]

    # -- chat: the prompt comes from the model's template; the generation is an `infer_stream` of this run ------
    def chat_stream(
        self, model: str, messages: list[ChatMessage], params: ChatParams, scope: RunScope | None = None
    ) -> ChatGeneration:
        self._check(model, scope)
        return self._chat.chat_stream(
            model, messages, params, start=lambda m, prompt, p: self.infer_stream(m, prompt, p, scope)
        )

    def chat(
        self, model: str, messages: list[ChatMessage], params: ChatParams, scope: RunScope | None = None
    ) -> ChatResult:
        return collect_chat(self.chat_stream(model, messages, params, scope))

    def apply_chat_template(
        self,
        model: str,
        messages: list[ChatMessage],
        tools: tuple[Tool, ...],
        add_generation_prompt: bool,
        scope: RunScope | None = None,
    ) -> str:
        self._check(model, scope)
        return self._chat.apply_template(model, messages, tools, add_generation_prompt)

    def embeddings(self, model: str, texts: list[str], scope: RunScope | None = None) -> EmbeddingsResult:
        self._check(model, scope)
        # Between chunks the call stops when the run is cancelled (disconnect, deadline, shutdown).
        return self._engine().embeddings(model, texts, scope.check if scope is not None else None)


@dataclass(frozen=True)
class ScopeLimits:
    """The per-run quotas and the stream idle limit (from the `sandbox` config section)."""

    stream_idle_timeout_s: float | None = 60.0
    max_open_streams: int = policy.MAX_OPEN_STREAMS
    max_open_sequences: int = policy.MAX_OPEN_SEQUENCES
    max_sequence_bytes: int = policy.MAX_SEQUENCE_MB * 1024 * 1024


def scope_streams(store: Any, limits: ScopeLimits) -> StreamTable:
    """The streams of the run `store` belongs to (closed, cancelling each, when the run ends)."""
    return scope_of(store).table(
        "streams",
        lambda: StreamTable(limits.stream_idle_timeout_s, limit=limits.max_open_streams),
        StreamTable.close,
        first=True,
    )


def define_llm(
    instance: LinkerInstance, service: LlmService, limits: ScopeLimits, imported: dict[str, FuncType]
) -> None:
    """Register the functions a component imports, typed by its own WIT import types (see `abi.ResultEncoder`).

    A function the component imports but this host does not know is left undefined: instantiation then fails
    with wasmtime's message naming it. Handles go to the calling run's scope (`runtime.scope`).
    """

    def open_stream(store: Any, model: str, prompt: str, params: Any) -> int:
        streams = scope_streams(store, limits)
        streams.check_room()
        return streams.open(service.infer_stream(model, prompt, abi.params_from_wit(params), scope_of(store)))

    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "infer": (
            lambda store, model, prompt, params: service.infer(
                model, prompt, abi.params_from_wit(params), scope_of(store)
            ),
            abi.inference_result_to_wit,
        ),
        "tokenize": (lambda store, model, text: service.tokenize(model, text, scope_of(store)), abi.tokens_to_wit),
        "get-model-info": (lambda store, model: service.model_info(model, scope_of(store)), abi.model_info_to_wit),
        "generate-embeddings": (
            lambda store, model, texts: service.embeddings(model, texts, scope_of(store)),
            abi.embeddings_to_wit,
        ),
        "infer-stream": (open_stream, lambda rep: abi.own_resource(rep, STREAM_TYPE_ID)),
        "[method]inference-stream.next": (
            lambda store, this: scope_streams(store, limits).next(abi.resource_rep(store, this)),
            abi.stream_event_to_wit,
        ),
    }
    # Functions that cannot fail (no result type): a host error here would trap, so they must not raise.
    infallible: dict[str, Callable[[Any], Any]] = {
        "list-models": lambda _store: [abi.model_info_to_wit(info) for info in _listed(service)],
    }
    if "infer-stream" in imported or "[method]inference-stream.next" in imported:
        instance.add_resource("inference-stream", ResourceType.host(STREAM_TYPE_ID), stream_dropped(limits, "stream"))
    for name, func_type in imported.items():
        if name in bindings:
            function, to_wit = bindings[name]
            encoder = abi.ResultEncoder.from_wit(func_type.result)
            add_func(instance, name, abi.guarded(function, to_wit, encoder, with_store=True), func_type)
        elif name in infallible:
            add_func(instance, name, infallible[name], func_type)
    from .chat import FUNCTIONS, define_chat  # chat builds on this module's tables

    chat_imports = {name: func_type for name, func_type in imported.items() if name in FUNCTIONS}
    if chat_imports:
        define_chat(instance, service, limits, chat_imports)


def _listed(service: LlmService) -> list[ModelInfo]:
    try:
        return service.list_models()
    except Exception:  # list-models has no error case: an engine failure lists nothing rather than trapping
        _log.exception("listing models failed")
        return []


def stream_dropped(limits: ScopeLimits, what: str) -> Callable[[Any, int], None]:
    """The destructor of a stream resource (`inference-stream`, `chat-completion-stream`): cancel the stream."""

    def destructor(store: Any, rep: int) -> None:
        # Runs when the guest drops its handle; like any host function it must not raise.
        try:
            scope_streams(store, limits).drop(rep)
        except Exception:  # a failure to cancel must not trap the guest that dropped the stream
            _log.exception("cancelling %s %d failed", what, rep)

    return destructor
