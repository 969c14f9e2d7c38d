"""The model service: the `llm` interface's operations on domain types, for guests and the Python API alike:
the component's model allow-list, the run's budget and cancellation, then the engine."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmhost.chat.service import ChatGeneration, ChatService, collect_chat
from llmhost.domain import types as dt
from llmhost.domain.errors import ModelNotSupported
from llmhost.domain.kinds import ModelKind
from llmhost.domain.limits import (
    ALLOWED_MODELS_KEY,
    MAX_OPEN_SEQUENCES,
    MAX_OPEN_STREAMS,
    MAX_SEQUENCE_MB,
    STREAM_IDLE_TIMEOUT_S,
)
from llmhost.engine.base import Engine, Generation, TokenSequence, collect
from llmhost.engine.registry import Registry
from llmhost.engine.status import ModelStatus, model_statuses
from llmhost.run.scope import RunScope, ScopedGeneration, ScopedSequence


class LlmService:
    """The interface's functions on domain types, shared by guests and the Python API.

    `registry` is a factory so that the (slow) engines are created only when a model is first used. Each function
    raises `LlmError` for expected failures; `define_llm` turns those into WIT `err` values. Guest calls pass
    their run's `scope`: the run owns their generations (cancelled with it, counted into its token budget).
    """

    def __init__(
        self,
        registry: Callable[[], Registry],
        allowed_models: frozenset[str] | None = None,
        allowed_key: str = f"`{ALLOWED_MODELS_KEY}` in the config",
        chat: ChatService | None = None,
    ) -> None:
        self._registry = registry
        self._allowed_models = allowed_models
        self._allowed_key = allowed_key
        self._chat = chat if chat is not None else ChatService(registry)

    def restricted_to(self, allowed_models: frozenset[str] | None, key: str | None = None) -> LlmService:
        """The same engine, serving only `allowed_models` (None: every configured model); `key` names the config
        key that grants them, for the refusal."""
        return LlmService(self._registry, allowed_models, key or self._allowed_key, self._chat)

    def _engine(self, model: str) -> Engine:
        return self._registry().engine(model)

    def _check(self, model: str, scope: RunScope | None) -> str:
        """The name the engine knows `model` by (an alias resolves to its model), once the run is still live and the
        allow-list grants the model. Every call that takes a model starts here."""
        if scope is not None:
            scope.check()
        name = self._registry().canonical(model)
        if self._allowed_models is not None and name not in self._allowed_models:
            allowed = ", ".join(sorted(self._allowed_models)) or "none"
            alias = f" (an alias of {name!r})" if name != model else ""
            raise ModelNotSupported(
                f"model {model!r}{alias} is not allowed for this component (allowed: {allowed}); add it to "
                f"{self._allowed_key}"
            )
        return name

    def infer(
        self, model: str, prompt: str, params: dt.InferencingParams, scope: RunScope | None = None
    ) -> dt.InferenceResult:
        if scope is None:
            model = self._check(model, None)
            return self._engine(model).infer(model, prompt, params)
        return collect(self.infer_stream(model, prompt, params, scope))

    def infer_stream(
        self, model: str, prompt: str, params: dt.InferencingParams, scope: RunScope | None = None
    ) -> Generation:
        """Validate and start a generation; input errors are raised here, before any token is generated."""
        model = self._check(model, scope)
        if scope is None:
            return self._engine(model).stream(model, prompt, params)
        with scope.waiting():  # a remote model counts the prompt on its server
            inner = self._engine(model).stream(model, prompt, scope.clamp(params))
        return ScopedGeneration(inner, scope)

    def open_sequence(self, model: str, scope: RunScope | None = None) -> TokenSequence:
        model = self._check(model, scope)
        with _waiting(scope):  # a model that must first make room under the memory budget waits as long as the run
            sequence = self._engine(model).open_sequence(model)
        return sequence if scope is None else ScopedSequence(sequence, scope)

    def tokenize(self, model: str, text: str, scope: RunScope | None = None) -> list[int]:
        model = self._check(model, scope)
        with _waiting(scope):
            return self._engine(model).tokenize(model, text)

    def default_params(self, model: str, scope: RunScope | None = None) -> dt.InferencingParams:
        """What `infer` uses for `model` when it gets no params (the same for every model today)."""
        model = self._check(model, scope)
        self._engine(model)  # an unknown model is `model-not-supported`, as for every call
        return dt.DEFAULT_PARAMS

    def model_info(self, model: str, scope: RunScope | None = None) -> dt.ModelInfo:
        model = self._check(model, scope)
        with _waiting(scope):
            return self._engine(model).model_info(model)

    def model_kind(self, model: str, scope: RunScope | None = None) -> ModelKind:
        """Base, instruct or embedding (`engine.kinds`); never loads the model."""
        model = self._check(model, scope)
        self._engine(model)  # an unknown model is `model-not-supported`, as for every call
        return self._registry().kind(model)

    def list_models(self) -> list[dt.ModelInfo]:
        """The models this component may use."""
        allowed = self._allowed_models
        return [info for info in self._registry().list_models() if allowed is None or info.name in allowed]

    def model_status(self) -> list[ModelStatus]:
        """The residency of the models this component may use (engine/status.py); loads and touches none."""
        allowed = self._allowed_models
        return [s for s in model_statuses(self._registry()) if allowed is None or s.name in allowed]

    # -- chat: the prompt comes from the model's template; the generation is an `infer_stream` of this run ------
    def chat_stream(
        self, model: str, messages: list[dt.ChatMessage], params: dt.ChatParams, scope: RunScope | None = None
    ) -> ChatGeneration:
        model = self._check(model, scope)
        return self._chat.chat_stream(
            model, messages, params, start=lambda m, prompt, p: self.infer_stream(m, prompt, p, scope)
        )

    def chat(
        self, model: str, messages: list[dt.ChatMessage], params: dt.ChatParams, scope: RunScope | None = None
    ) -> dt.ChatResult:
        return collect_chat(self.chat_stream(model, messages, params, scope))

    def apply_chat_template(
        self,
        model: str,
        messages: list[dt.ChatMessage],
        tools: tuple[dt.Tool, ...],
        add_generation_prompt: bool,
        scope: RunScope | None = None,
    ) -> str:
        model = self._check(model, scope)
        with _waiting(scope):
            return self._chat.apply_template(model, messages, tools, add_generation_prompt)

    def embeddings(
        self, model: str, texts: Sequence[dt.EmbeddingInput], scope: RunScope | None = None
    ) -> dt.EmbeddingsResult:
        """Texts (`generate-embeddings`) or token-id lists taken as they are (`generate-embeddings-for-tokens`)."""
        model = self._check(model, scope)
        # Between chunks the call stops when the run is cancelled (disconnect, deadline, shutdown).
        with _waiting(scope):
            return self._engine(model).embeddings(model, texts, scope.check if scope is not None else None)


def _waiting(scope: RunScope | None) -> contextlib.AbstractContextManager[None]:
    """Remote requests made inside end by the run's deadline (none without a scope: `read-timeout-s` then)."""
    return scope.waiting() if scope is not None else contextlib.nullcontext()


@dataclass(frozen=True)
class ScopeLimits:
    """The per-run quotas and the stream idle limit (from the `sandbox` config section)."""

    stream_idle_timeout_s: float | None = STREAM_IDLE_TIMEOUT_S
    max_open_streams: int = MAX_OPEN_STREAMS
    max_open_sequences: int = MAX_OPEN_SEQUENCES
    max_sequence_bytes: int = MAX_SEQUENCE_MB * 1024 * 1024
