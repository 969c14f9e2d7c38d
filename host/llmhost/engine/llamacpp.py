"""The llama.cpp backend, on llama-cpp-python's low-level API (batch + llama_decode, sampler chains, KV trims).

One llama context per model holds `slots` sequences (a seq_id each). A generation holds a slot for its
lifetime; every step (decode one batch, sample) runs under the model's lock, so generations of one model
interleave safely. Continuous batching (several slots in one decode) extends `LlamaModel.step`-style calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import policy
from ..config import ModelConfig
from ..types import (
    EmbeddingsResult,
    EngineError,
    InferenceResult,
    InferencingParams,
    InvalidInput,
    ModelInfo,
    ModelNotSupported,
    StreamDone,
    StreamEvent,
)
from .base import collect
from .generation import GenerationText
from .models import resolve_model_path
from .sampling import build_sampler

log = logging.getLogger(__name__)

_llama: Any = None
_log_callback: Any = None  # kept referenced: llama.cpp holds a raw pointer to it
_backend_lock = threading.Lock()
_GGML_LOG_ERROR = 4  # ggml_log_level in this llama.cpp: none 0, debug 1, info 2, warn 3, error 4, cont 5


def _install_log_callback(llama_cpp: Any) -> None:
    """Send llama.cpp's errors to our logger and drop its chatter (llama-cpp-python's own callback maps the
    levels of this llama.cpp version wrongly and prints every warning)."""
    global _log_callback

    def forward(level: int, text: bytes, _user_data: Any) -> None:
        if level == _GGML_LOG_ERROR:
            log.error("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

    _log_callback = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def llama_lib() -> Any:
    """Import llama_cpp on first use (it loads the shared library) and quiet its logging."""
    global _llama
    with _backend_lock:
        if _llama is None:
            import llama_cpp

            _install_log_callback(llama_cpp)
            llama_cpp.llama_backend_init()
            _llama = llama_cpp
    return _llama


class LlamaModel:
    """A loaded model: weights, vocabulary, one context with `config.slots` sequence slots."""

    def __init__(self, name: str, config: ModelConfig, path: Path) -> None:
        lib = llama_lib()
        self.name = name
        self.config = config
        self.lib = lib
        self.lock = threading.RLock()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = config.n_gpu_layers if config.n_gpu_layers >= 0 else 2**31 - 1
        self.model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {path} (check `models.{name}.path`)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = config.context_length
        self.n_batch = min(config.batch_size, self.n_ctx)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = config.slots
        cparams.kv_unified = True  # slots share the window; seq_cp is metadata-only
        cparams.n_threads = config.threads
        cparams.n_threads_batch = config.threads
        cparams.no_perf = True
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise EngineError(
                f"llama.cpp could not create a context of {self.n_ctx} tokens for {name} "
                f"(lower `models.{name}.context-length`)"
            )
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self._free_slots = list(range(config.slots))
        # Tokens run through the model so far (prefill and decode): what generations cost, for tests and stats.
        self.evaluated_tokens = 0
        self._slot_available = threading.Condition(self.lock)
        self._embed_ctx: Any = None

    # --- slots -------------------------------------------------------------------------------------------
    def acquire_slot(self) -> int:
        with self._slot_available:
            if not self._slot_available.wait_for(lambda: self._free_slots, timeout=policy.SLOT_WAIT_TIMEOUT_S):
                raise EngineError(
                    f"all {self.config.slots} sequence slots of {self.name} stayed busy for "
                    f"{policy.SLOT_WAIT_TIMEOUT_S:.0f} s (raise `models.{self.name}.slots` in the config)"
                )
            seq = self._free_slots.pop(0)
            self.lib.llama_memory_seq_rm(self.memory, seq, 0, -1)
            return seq

    @property
    def free_slots(self) -> int:
        with self.lock:
            return len(self._free_slots)

    def release_slot(self, seq: int) -> None:
        with self._slot_available:
            self.lib.llama_memory_seq_rm(self.memory, seq, 0, -1)
            self._free_slots.append(seq)
            self._slot_available.notify()

    # --- vocabulary --------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode()
        size = len(data) + 8
        while True:
            buf = (self.lib.llama_token * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, size, add_special, True)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens render as nothing)."""
        buf = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    # --- decoding ----------------------------------------------------------------------------------------
    def decode(self, seq: int, tokens: list[int], start_pos: int) -> None:
        """Evaluate `tokens` at positions start_pos.. into `seq`; logits are kept for the last one (row -1)."""
        lib, batch = self.lib, self.batch
        for offset in range(0, len(tokens), self.n_batch):
            chunk = tokens[offset : offset + self.n_batch]
            last_chunk = offset + self.n_batch >= len(tokens)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = start_pos + offset + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = 1 if last_chunk and i == len(chunk) - 1 else 0
            batch.n_tokens = len(chunk)
            rc = lib.llama_decode(self.ctx, batch)
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc} (context of {self.n_ctx} tokens)")
            self.evaluated_tokens += len(chunk)

    def sample(self, sampler: Any) -> int:
        return int(self.lib.llama_sampler_sample(sampler, self.ctx, -1))

    # --- embeddings --------------------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> EmbeddingsResult:
        lib = self.lib
        with self.lock:
            if self._embed_ctx is None:
                cparams = lib.llama_context_default_params()
                cparams.n_ctx = self.n_ctx
                cparams.n_batch = self.n_ctx
                cparams.n_ubatch = self.n_ctx
                cparams.n_seq_max = 1
                cparams.n_threads = self.config.threads
                cparams.n_threads_batch = self.config.threads
                cparams.embeddings = True
                cparams.pooling_type = lib.LLAMA_POOLING_TYPE_MEAN
                cparams.no_perf = True
                self._embed_ctx = lib.llama_init_from_model(self.model, cparams)
                if not self._embed_ctx:
                    raise EngineError(f"llama.cpp could not create an embeddings context for {self.name}")
            ctx = self._embed_ctx
            batch = lib.llama_batch_init(self.n_ctx, 0, 1)
            vectors: list[list[float]] = []
            total = 0
            n_embd = lib.llama_model_n_embd(self.model)
            try:
                for index, text in enumerate(texts):
                    tokens = self.tokenize(text)
                    total += len(tokens)
                    if len(tokens) > self.n_ctx:
                        raise InvalidInput(
                            f"text[{index}] is {len(tokens)} tokens but the context window is {self.n_ctx} tokens"
                        )
                    lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
                    for i, tok in enumerate(tokens):
                        batch.token[i] = tok
                        batch.pos[i] = i
                        batch.n_seq_id[i] = 1
                        batch.seq_id[i][0] = 0
                        batch.logits[i] = 1
                    batch.n_tokens = len(tokens)
                    rc = lib.llama_decode(ctx, batch)
                    if rc != 0:
                        raise EngineError(f"llama_decode failed with code {rc} while embedding text[{index}]")
                    ptr = lib.llama_get_embeddings_seq(ctx, 0)
                    vec = [float(ptr[i]) for i in range(n_embd)]
                    norm = sum(v * v for v in vec) ** 0.5 or 1.0
                    vectors.append([v / norm for v in vec])
            finally:
                lib.llama_batch_free(batch)
            return EmbeddingsResult(embeddings=vectors, prompt_token_count=total)

    def close(self) -> None:
        lib = self.lib
        with self.lock:
            if self._embed_ctx:
                lib.llama_free(self._embed_ctx)
                self._embed_ctx = None
            if self.ctx:
                lib.llama_batch_free(self.batch)
                lib.llama_free(self.ctx)
                lib.llama_model_free(self.model)
                self.ctx = None


class LlamaGeneration:
    """One generation in its own slot. Each `next()` runs one step (prefill, or decode the last token) under the
    model lock, samples, and returns the next certain chunk; the final event is `StreamDone`."""

    def __init__(self, model: LlamaModel, prompt_tokens: list[int], params: InferencingParams) -> None:
        self._model = model
        self._prompt = prompt_tokens
        self._params = params
        self._state = GenerationText(params.stop, len(prompt_tokens), params.max_tokens)
        self._seq: int | None = None
        self._sampler: Any = None
        self._last_token: int | None = None
        self._pos = 0
        self._done_event: StreamDone | None = None
        self.finished = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        while not self.finished:
            if self._done_event is not None:
                event, self._done_event = self._done_event, None
                self.close()
                return event
            step = self._step()
            if step.finish is not None:
                self._done_event = StreamDone(finish_reason=step.finish, usage=self._state.usage)
            if step.chunk is not None:
                return step.chunk
        raise StopIteration

    def _start(self) -> None:
        model = self._model
        self._seq = model.acquire_slot()
        self._sampler = build_sampler(model.lib, model.n_vocab, self._params)
        for tok in self._prompt:  # the repeat penalty sees the prompt too
            model.lib.llama_sampler_accept(self._sampler, tok)
        model.decode(self._seq, self._prompt, 0)
        self._pos = len(self._prompt)

    def _step(self) -> Any:
        model = self._model
        with model.lock:
            if self._seq is None:
                self._start()
            elif self._last_token is not None:
                model.decode(self._seq, [self._last_token], self._pos)
                self._pos += 1
            assert self._seq is not None
            token = model.sample(self._sampler)
        self._last_token = token
        # The window is full when this token could not be decoded to get another after it.
        context_full = len(self._prompt) + len(self._state.token_ids) + 1 >= model.n_ctx
        return self._state.on_token(
            token, model.piece(token), end_of_generation=model.is_eog(token), context_full=context_full
        )

    def close(self) -> None:
        if self.finished:
            return
        self.finished = True
        model = self._model
        with model.lock:
            if self._sampler is not None:
                model.lib.llama_sampler_free(self._sampler)
                self._sampler = None
            if self._seq is not None:
                model.release_slot(self._seq)
                self._seq = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the library may be gone
            self.close()


class LlamaCppEngine:
    def __init__(self, models: Mapping[str, ModelConfig], cache_dir: Path) -> None:
        self._configs = dict(models)
        self._cache_dir = cache_dir
        self._loaded: dict[str, LlamaModel] = {}
        self._load_lock = threading.Lock()

    def model_names(self) -> list[str]:
        return list(self._configs)

    def model(self, name: str) -> LlamaModel:
        """The loaded model (loaded on first use, then shared by every call)."""
        config = self._configs.get(name)
        if config is None:
            raise ModelNotSupported(
                f"model {name!r} is not configured; known models: {', '.join(self._configs)} "
                "(add it under [models] in the config)"
            )
        with self._load_lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                path = resolve_model_path(name, config, self._cache_dir)
                loaded = self._loaded[name] = LlamaModel(name, config, path)
            return loaded

    def model_info(self, model: str) -> ModelInfo:
        m = self.model(model)
        return ModelInfo(name=model, context_length=m.n_ctx, vocab_size=m.n_vocab)

    def tokenize(self, model: str, text: str) -> list[int]:
        return self.model(model).tokenize(text)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> LlamaGeneration:
        policy.validate_params(params)
        m = self.model(model)
        tokens = m.tokenize(prompt)
        if not tokens:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        policy.check_prompt_fits(len(tokens), m.n_ctx)
        return LlamaGeneration(m, tokens, params)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(self, model: str, texts: list[str]) -> EmbeddingsResult:
        return self.model(model).embed(texts)

    def close(self) -> None:
        with self._load_lock:
            for m in self._loaded.values():
                m.close()
            self._loaded.clear()
