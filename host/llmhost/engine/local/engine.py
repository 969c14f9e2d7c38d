"""The llama.cpp backend: models from GGUF files, each an `EngineModel` over a `LlamaDecoder`.

Decoding, slots and scheduling are backend-neutral (model.py, scheduler.py, slots.py); llama.cpp itself is only
behind the decoder (llama_decoder.py). Models load at first use and unload when idle (model_pool.py): every call
pins its model while it runs, a one-off generation until it ends, a sequence (and its forks) until it is closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from llmhost.config import ModelConfig
from llmhost.domain import types as dt
from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import ADMISSION_TIMEOUT_S, DEFAULT_MODEL
from llmhost.engine.base import UNBOUNDED, Bounds, TokenSequence, collect
from llmhost.engine.chat_template import choose_template
from llmhost.engine.local.footprint import footprint_bytes
from llmhost.engine.local.job import LlamaGeneration
from llmhost.engine.local.llama_decoder import LlamaDecoder, llama_lib
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.model_pool import MB, ModelPool, ModelState
from llmhost.engine.local.models import resolve_model_path
from llmhost.engine.local.sequence import LlamaSequence
from llmhost.engine.local.sequence_state import SeqState
from llmhost.engine.observer import NO_OBSERVER, ModelObserver, Observers, no_observers

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

__all__ = ["LlamaCppEngine", "LlamaModel", "PinnedSequence", "llama_lib"]

log = logging.getLogger(__name__)


def LlamaModel(  # noqa: N802 (a constructor)
    name: str, config: ModelConfig, path: Path, observer: ModelObserver = NO_OBSERVER
) -> EngineModel:
    """A model loaded from a GGUF file with llama.cpp."""
    return EngineModel(name, config, LlamaDecoder(name, config, path), observer)


class PinnedSequence(LlamaSequence):
    """A sequence that pins its model while open (its KV cache lives there); so do its forks and beams."""

    def __init__(self, model: EngineModel, pool: ModelPool[EngineModel], state: SeqState | None = None) -> None:
        super().__init__(model, state)
        self._pool = pool

    def _adopt(self, plain: LlamaSequence) -> PinnedSequence:
        self._pool.acquire(self._model.name)  # loaded: this sequence pins it
        return PinnedSequence(self._model, self._pool, plain._state)

    def fork(self) -> PinnedSequence:
        return self._adopt(super().fork())

    def beam_search(self, params: dt.BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[TokenSequence, float]]:
        found = super().beam_search(params, bounds)
        return [(self._adopt(cast(LlamaSequence, sequence)), score) for sequence, score in found]

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._pool.release(self._model.name)


class LlamaCppEngine:
    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        cache_dir: Path,
        note: Callable[[str], None] | None = None,
        load: Callable[[str, ModelConfig], EngineModel] | None = None,
        observers: Observers = no_observers,
        memory_budget_mb: int | None = None,
        size: Callable[[str, ModelConfig], int] | None = None,
        wait_s: float = ADMISSION_TIMEOUT_S,
    ) -> None:
        """`load(name, config)`: how a model is loaded (default: its GGUF file with llama.cpp; tests pass
        `EngineModel` over a `FakeDecoder`). `observers(name)`: each model's observer (metrics). Models load on
        first use and unload when idle (model_pool.py): `memory_budget_mb` bounds them together, each counted as
        `size(name, config)` bytes (default: footprint.py's estimate for a GGUF; 0 with a `load` of one's own);
        a model waiting for room waits up to its run's deadline, else `wait_s`."""
        self._note = note
        self._observers = observers
        self._load = load
        self._cache_dir = cache_dir
        if size is None:
            size = self._footprint if load is None else (lambda name, config: 0)
        self._pool: ModelPool[EngineModel] = ModelPool(
            models,
            self._load_model,
            size=size,
            budget_bytes=memory_budget_mb * MB if memory_budget_mb is not None else None,
            on_loaded=lambda name, size: self._observers(name).loaded(size),
            on_unloaded=lambda name: self._observers(name).unloaded(),
            wait_s=wait_s,
        )
        self._configs = self._pool.configs
        self._vocab: dict[str, int] = {}  # each model's vocabulary size once known (listings, after an unload)

    def _footprint(self, name: str, config: ModelConfig) -> int:
        return footprint_bytes(resolve_model_path(name, config, self._cache_dir), config)

    def _load_model(self, name: str, config: ModelConfig) -> EngineModel:
        started = time.monotonic()
        if self._load is not None:
            loaded = self._load(name, config)
        else:
            path = resolve_model_path(name, config, self._cache_dir)
            loaded = LlamaModel(name, config, path, self._observers(name))
        self._vocab[name] = loaded.n_vocab
        if self._note is not None:
            self._note(f"loaded model {name} in {time.monotonic() - started:.1f} s")
        return loaded

    def model_names(self) -> list[str]:
        return list(self._configs)

    def model(self, name: str) -> EngineModel:
        """The model, loaded now if it is not (tests and benchmarks read its counters; nothing pins it)."""
        with self._pool.lease(name) as model:
            return model

    def preload(self, names: Sequence[str]) -> None:
        """Load these models now (`serve --preload`); their keep-alive starts at once."""
        for name in names:
            self.model(name)

    def unload_idle(self, names: list[str] | None = None) -> list[str]:
        """Unload the idle models among `names` now (None: those past their keep-alive); returns the unloaded."""
        return self._pool.unload_idle(names)

    def residency(self) -> list[ModelState]:
        """Each model's state: loaded or not, its footprint, pins, idle time, loads and unloads so far."""
        return self._pool.states()

    def list_models(self) -> list[dt.ModelInfo]:
        return [
            dt.ModelInfo(name=name, context_length=config.context_length, vocab_size=self._vocab.get(name, 0))
            for name, config in self._configs.items()
        ]

    def model_info(self, model: str) -> dt.ModelInfo:
        with self._pool.lease(model) as m:
            return dt.ModelInfo(name=model, context_length=m.n_ctx, vocab_size=m.n_vocab)

    def tokenize(self, model: str, text: str) -> list[int]:
        dt.check_tokenize_length(text)
        with self._pool.lease(model) as m:
            return m.tokenize(text)

    def stream(self, model: str, prompt: str, params: dt.InferencingParams) -> LlamaGeneration:
        m = self._pool.acquire(model)  # pinned until the generation ends
        try:
            generation = self._start(m, prompt, params)
        except BaseException:
            self._pool.release(model)
            raise
        return generation

    def _start(self, m: EngineModel, prompt: str, params: dt.InferencingParams) -> LlamaGeneration:
        m.check_generates("generate text (infer, chat, OpenAI completions)")
        tokens = m.tokenize(prompt, room=m.n_ctx, what="prompt")
        if not tokens:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        dt.check_prompt_fits(len(tokens), m.n_ctx)
        # A one-off request never reads its per-token texts (only sequences do): skip detokenizing the prompt.
        state = SeqState(tokens, [""] * len(tokens))
        # A one-off sequence: when it ends, its KV cache stays behind only as a prompt-prefix cache, if the model
        # keeps one; otherwise its cells are freed at once (the cache then spans fewer cells: see docs/performance.md).
        free = m.slots.retire if m.config.prefix_cache else m.slots.detach

        def on_end(state: SeqState) -> None:  # once, under the model's lock: the model may go idle now
            free(state)
            self._pool.release(m.name)

        constraint = m.prepare(params)  # invalid-input here, before any token
        return LlamaGeneration(
            m, state, params, on_end=on_end, reuse_prefix=m.config.prefix_cache, constraint=constraint
        )

    def open_sequence(self, model: str) -> LlamaSequence:
        m = self._pool.acquire(model)  # pinned until the sequence is closed
        try:
            m.check_generates("open a sequence (generate, score, beam search)")
            m.check_swap_room()
        except BaseException:
            self._pool.release(model)
            raise
        return PinnedSequence(m, self._pool)

    def infer(self, model: str, prompt: str, params: dt.InferencingParams) -> dt.InferenceResult:
        generation = self.stream(model, prompt, params)
        generation.streamed = False  # read whole: its first tokens need not end a burst
        return collect(generation)

    def chat_template(self, model: str) -> TemplateInfo:
        with self._pool.lease(model) as m:
            m.check_generates("chat")
            # Only the default model's embedded weights (no `path`) lack a template and get Gemma 3's built in.
            default_weights = m.config.path is None and model == DEFAULT_MODEL
            return choose_template(model, m.config, m.decoder.chat_template(), default_weights=default_weights)

    def embeddings(
        self, model: str, texts: Sequence[dt.EmbeddingInput], check: Callable[[], None] | None = None
    ) -> dt.EmbeddingsResult:
        with self._pool.lease(model) as loaded:
            result = loaded.embed(texts, check)
            loaded.observer.embeddings_done(result.prompt_token_count)  # metrics: prompt tokens, as a generation's
            return result

    def close(self) -> None:
        self._pool.close()
