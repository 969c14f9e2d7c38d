"""The llama.cpp backend: models from GGUF files, each an `EngineModel` over a `LlamaDecoder`.

Decoding, slots and scheduling are backend-neutral (model.py, scheduler.py, slots.py); llama.cpp itself is only
behind the decoder (llama_decoder.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.domain.types import (
    EmbeddingInput,
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    ModelInfo,
    check_prompt_fits,
    check_tokenize_length,
)
from llmhost.engine.base import Models, collect
from llmhost.engine.chat_template import choose_template
from llmhost.engine.local.job import LlamaGeneration
from llmhost.engine.local.llama_decoder import LlamaDecoder, llama_lib
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.models import resolve_model_path
from llmhost.engine.local.sequence import LlamaSequence
from llmhost.engine.local.sequence_state import SeqState
from llmhost.engine.observer import NO_OBSERVER, ModelObserver, Observers, no_observers

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

__all__ = ["LlamaCppEngine", "LlamaModel", "llama_lib"]

log = logging.getLogger(__name__)


def LlamaModel(  # noqa: N802 (a constructor)
    name: str, config: ModelConfig, path: Path, observer: ModelObserver = NO_OBSERVER
) -> EngineModel:
    """A model loaded from a GGUF file with llama.cpp."""
    return EngineModel(name, config, LlamaDecoder(name, config, path), observer)


class LlamaCppEngine:
    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        cache_dir: Path,
        note: Callable[[str], None] | None = None,
        load: Callable[[str, ModelConfig], EngineModel] | None = None,
        observers: Observers = no_observers,
    ) -> None:
        """`load(name, config)`: how a model is loaded (default: its GGUF file with llama.cpp; tests pass
        `EngineModel` over a `FakeDecoder`). `observers(name)`: each model's observer (metrics)."""
        self._note = note
        self._observers = observers
        self._load = load
        self._cache_dir = cache_dir
        self._models = Models(models, self._load_model)
        self._configs = self._models.configs

    def _load_model(self, name: str, config: ModelConfig) -> EngineModel:
        started = time.monotonic()
        if self._load is not None:
            loaded = self._load(name, config)
        else:
            path = resolve_model_path(name, config, self._cache_dir)
            loaded = LlamaModel(name, config, path, self._observers(name))
        if self._note is not None:
            self._note(f"loaded model {name} in {time.monotonic() - started:.1f} s")
        return loaded

    def model_names(self) -> list[str]:
        return list(self._configs)

    def model(self, name: str) -> EngineModel:
        """The loaded model (loaded on first use, then shared by every call)."""
        return self._models.get(name)

    def list_models(self) -> list[ModelInfo]:
        loaded = self._models.made()
        return [
            ModelInfo(
                name=name,
                context_length=config.context_length,
                vocab_size=loaded[name].n_vocab if name in loaded else 0,
            )
            for name, config in self._configs.items()
        ]

    def model_info(self, model: str) -> ModelInfo:
        m = self.model(model)
        return ModelInfo(name=model, context_length=m.n_ctx, vocab_size=m.n_vocab)

    def tokenize(self, model: str, text: str) -> list[int]:
        check_tokenize_length(text)
        return self.model(model).tokenize(text)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> LlamaGeneration:
        m = self.model(model)
        m.check_generates("generate text (infer, chat, OpenAI completions)")
        tokens = m.tokenize(prompt, room=m.n_ctx, what="prompt")
        if not tokens:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        check_prompt_fits(len(tokens), m.n_ctx)
        # A one-off request never reads its per-token texts (only sequences do): skip detokenizing the prompt.
        state = SeqState(tokens, [""] * len(tokens))
        # A one-off sequence: when it ends, its KV cache stays behind only as a prompt-prefix cache, if the model
        # keeps one; otherwise its cells are freed at once (the cache then spans fewer cells: see README).
        on_end = m.slots.retire if m.config.prefix_cache else m.slots.detach
        constraint = m.prepare(params)  # invalid-input here, before any token
        return LlamaGeneration(
            m, state, params, on_end=on_end, reuse_prefix=m.config.prefix_cache, constraint=constraint
        )

    def open_sequence(self, model: str) -> LlamaSequence:
        m = self.model(model)
        m.check_generates("open a sequence (generate, score, beam search)")
        m.check_swap_room()
        return LlamaSequence(m)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        generation = self.stream(model, prompt, params)
        generation.streamed = False  # read whole: its first tokens need not end a burst
        return collect(generation)

    def chat_template(self, model: str) -> TemplateInfo:
        m = self.model(model)
        m.check_generates("chat")
        # Only the default model's embedded weights (no `path`) lack a template and get Gemma 3's built in.
        default_weights = m.config.path is None and model == DEFAULT_MODEL
        return choose_template(model, m.config, m.decoder.chat_template(), default_weights=default_weights)

    def embeddings(
        self, model: str, texts: Sequence[EmbeddingInput], check: Callable[[], None] | None = None
    ) -> EmbeddingsResult:
        loaded = self.model(model)
        result = loaded.embed(texts, check)
        loaded.observer.embeddings_done(result.prompt_token_count)  # metrics: prompt tokens, as a generation's
        return result

    def close(self) -> None:
        self._models.close()
