"""The llama.cpp backend, on llama-cpp-python's low-level API (batch + llama_decode, sampler chains, KV trims).

One llama context per model holds `slots` sequence slots (a seq_id each) in a unified KV cache of
`context-length × slots` cells, so every resident sequence can use its whole window. Sequences (a running
`infer`, or a guest's `sequence`) attach to a slot while they need one; when all slots are taken, the least
recently used idle sequence is swapped out to host memory and restored on its next use. Every llama.cpp call
runs under the model's lock; a scheduler thread decodes every running generation in one batch per step
(scheduler.py); slots.py keeps the slots; llama_sequence.py has the guest-facing sequences.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import policy
from ..config import ModelConfig
from ..types import (
    Constraint,
    EmbeddingsResult,
    EngineError,
    InferenceResult,
    InferencingParams,
    InvalidInput,
    ModelInfo,
    ModelNotSupported,
    TokenLogprob,
    TopLogprob,
)
from .base import collect
from .constraint_mask import TokenConstraint
from .llama_sequence import LlamaSequence
from .models import resolve_model_path
from .scheduler import LlamaGeneration, Row, Scheduler
from .sequence_state import SeqState, attribute_text
from .slots import SlotPool

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


def vocab_tokenize(lib: Any, vocab: Any, text: str, add_special: bool = True) -> list[int]:
    """Token ids of `text` (special-token text parsed as special tokens, as every prompt is)."""
    data = text.encode()
    size = len(data) + 8
    while True:
        buf = (lib.llama_token * size)()
        n = lib.llama_tokenize(vocab, data, len(data), buf, size, add_special, True)
        if n >= 0:
            return list(buf[:n])
        size = -n


def vocab_piece(lib: Any, vocab: Any, token: int) -> bytes:
    """The bytes of one token (control tokens render as nothing)."""
    buf = ctypes.create_string_buffer(64)
    n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return bytes(buf.raw[:n])


class LlamaVocab:
    """Only a model file's vocabulary (`vocab_only`: no weights, no context; ~0.1 s): how remote models whose
    file is known here tokenize exactly as the server does, with no round trip."""

    def __init__(self, path: Path, name: str) -> None:
        self.lib = llama_lib()
        mparams = self.lib.llama_model_default_params()
        mparams.vocab_only = True
        self.model = self.lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not read the vocabulary of {path} (check `models.{name}.path`)")
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(self.lib.llama_vocab_n_tokens(self.vocab))

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return vocab_tokenize(self.lib, self.vocab, text, add_special)

    def piece(self, token: int) -> bytes:
        return vocab_piece(self.lib, self.vocab, token)

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


class LlamaModel:
    """A loaded model: weights, vocabulary, one context, and its pool of sequence slots."""

    def __init__(self, name: str, config: ModelConfig, path: Path) -> None:
        lib = llama_lib()
        self.name = name
        self.config = config
        self.lib = lib
        self.lock = threading.RLock()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = config.n_gpu_layers if config.n_gpu_layers >= 0 else 2**31 - 1
        # llama.cpp's CPU weight repacking computes a row with 4-row tiles or single-row kernels depending on
        # where the row falls in the batch, so a request's logits would depend on what it is batched with.
        # Without it, every row is computed alike: greedy outputs under batching equal outputs run alone.
        mparams.use_extra_bufts = not config.exact_batching
        self.model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {path} (check `models.{name}.path`)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = config.context_length  # the window of one sequence
        self.n_batch = min(config.batch_size, self.n_ctx)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.n_ctx * config.slots
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = config.slots
        cparams.kv_unified = True  # one cell pool for all slots: seq_cp (fork, prefix reuse) copies no data
        cparams.n_threads = config.threads
        cparams.n_threads_batch = config.threads
        cparams.no_perf = True
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise EngineError(
                f"llama.cpp could not create a context of {self.n_ctx} × {config.slots} tokens for {name} "
                f"(lower `models.{name}.context-length` or `models.{name}.slots`)"
            )
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        # Decode threads on every core the process may use, and no GPU doing the work (see scheduler.READER_TURN_S)
        self.cpu_bound = config.n_gpu_layers == 0 and config.threads >= len(os.sched_getaffinity(0))
        self.scheduler = Scheduler(self)
        self.slots = SlotPool(lib, self.ctx, config.slots, self.lock, name, on_free=self.scheduler.wake)
        self._embed_ctx: Any = None
        self._embed_batch: Any = None
        self._constraints: Any = None  # the model's ConstraintCompiler, created on first use (llguidance)
        self._constraints_lock = threading.Lock()
        # Tokens run through the model so far (prefill and decode): what generations cost, for tests and stats.
        self.evaluated_tokens = 0
        self.decode_seconds = 0.0  # wall time spent in llama_decode (benchmarks subtract it from latencies)
        self.decoding = False  # inside llama_decode now

    @property
    def free_slots(self) -> int:
        return self.slots.available

    def check_swap_room(self) -> None:
        """Refuse a new sequence while swapped-out sequences hold the model's host-memory cap (each new one may
        push another out to host memory)."""
        limit = self.config.max_swapped_mb * 1024 * 1024
        if self.slots.swapped_bytes >= limit:
            raise InvalidInput(
                f"model {self.name!r} holds {self.slots.swapped_bytes / 2**20:.0f} MB of swapped-out sequences, its "
                f"limit (close some sequences, or raise `models.{self.name}.max-swapped-mb` in the config)"
            )

    @property
    def swapped_bytes(self) -> int:
        return self.slots.swapped_bytes

    @property
    def swaps_out(self) -> int:
        return self.slots.swaps_out

    @property
    def reused_prompt_tokens(self) -> int:
        return self.slots.reused_prompt_tokens

    # --- vocabulary --------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return vocab_tokenize(self.lib, self.vocab, text, add_special)

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens render as nothing)."""
        return vocab_piece(self.lib, self.vocab, token)

    def texts_of(self, tokens: list[int], text: str) -> list[str]:
        return attribute_text([self.piece(t) for t in tokens], text)

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    # --- decoding ----------------------------------------------------------------------------------------
    def evaluate(self, state: SeqState, upto: int) -> None:
        """Run tokens[n_kv:upto] of `state` through the model now, in batch-size chunks (the logits of the last
        one are row -1 afterwards). For appends; generations go through the scheduler. Lock held, attached."""
        while state.n_kv < upto:
            chunk = state.tokens[state.n_kv : min(upto, state.n_kv + self.n_batch)]
            self._decode([(state, chunk)], logits_rows={len(chunk) - 1})
            state.n_kv += len(chunk)
            state.evaluated += len(chunk)
            self.evaluated_tokens += len(chunk)

    def decode_rows(self, rows: list[Row]) -> list[Row]:
        """Decode one scheduler step: every row's tokens of its sequence in one batch. Rows that ask to sample
        get `sample_at` set to their batch index. When llama.cpp finds no room in the KV cache (code 1), the
        batch is shrunk (prefill chunks dropped from the end) and retried; what was left out runs next step."""
        while rows:
            plan: list[tuple[SeqState, list[int]]] = []
            logits_rows: set[int] = set()
            index = 0
            for row in rows:
                plan.append((row.job.state, row.tokens))
                index += len(row.tokens)
                if row.sample_at is not None:
                    row.sample_at = index - 1
                    logits_rows.add(index - 1)
            rc = self._decode(plan, logits_rows, raise_on_full=False)
            if rc == 0:
                for row in rows:
                    row.job.state.n_kv += len(row.tokens)
                    row.job.state.evaluated += len(row.tokens)
                    self.evaluated_tokens += len(row.tokens)
                return rows
            rows = rows[: len(rows) // 2] if len(rows) > 1 else []
        return []

    def _decode(self, plan: list[tuple[SeqState, list[int]]], logits_rows: set[int], raise_on_full: bool = True) -> int:
        batch = self.batch
        i = 0
        for state, tokens in plan:
            assert state.slot is not None
            for offset, tok in enumerate(tokens):
                batch.token[i] = tok
                batch.pos[i] = state.n_kv + offset
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = state.slot
                batch.logits[i] = 1 if i in logits_rows else 0
                i += 1
        batch.n_tokens = i
        started = time.perf_counter()
        self.decoding = True
        rc = int(self.lib.llama_decode(self.ctx, batch))
        self.decoding = False
        self.decode_seconds += time.perf_counter() - started
        if rc == 1 and not raise_on_full:
            return rc
        if rc != 0:
            raise EngineError(f"llama_decode failed with code {rc} (context of {self.n_ctx} tokens per sequence)")
        return rc

    def unevaluate_last(self, state: SeqState) -> None:
        """When every token of `state` is in the cache, drop the last one from it: its logits are gone once
        anything else ran, and evaluating it again is how to get them. Lock held, `state` attached."""
        if state.n_kv >= len(state.tokens):
            state.n_kv = len(state.tokens) - 1
            assert state.slot is not None
            self.lib.llama_memory_seq_rm(self.memory, state.slot, state.n_kv, -1)

    def prepare(self, params: InferencingParams) -> TokenConstraint | None:
        """The model-dependent checks of `params` (token ids in its vocabulary; the constraint compiles), and the
        generation's fresh constraint matcher. Raises `InvalidInput` before any token is generated."""
        for i, entry in enumerate(params.logit_bias):
            if entry.token_id >= self.n_vocab:
                raise InvalidInput(
                    f"logit-bias[{i}].token-id {entry.token_id} is not a token of {self.name} "
                    f"(ids are 0 to {self.n_vocab - 1})"
                )
        return self.new_constraint(params.constraint)

    def new_constraint(self, constraint: Constraint | None) -> TokenConstraint | None:
        """A fresh matcher for one generation (compiled grammars are cached by their text). Raises
        `InvalidInput` with the parser's message for a bad schema, regex or grammar."""
        if constraint is None:
            return None
        with self._constraints_lock:
            if self._constraints is None:
                from .constraints import ConstraintCompiler

                self._constraints = ConstraintCompiler.from_llama_vocab(self.lib, self.vocab, self.n_vocab)
            compiler = self._constraints
        return compiler.start(constraint)

    def sample(self, sampler: Any, row: int = -1) -> int:
        return int(self.lib.llama_sampler_sample(sampler, self.ctx, row))

    def sample_row(self, job: LlamaGeneration, row: int, mask: Any) -> tuple[int, float | None, TokenLogprob | None]:
        """Sample `job`'s next token from output `row`: log-probabilities from the raw logits, then the
        constraint's mask, then the sampler chain. Returns (token, its raw logprob, its logprob entry)."""
        if not job.logprobs and job.constraint is None:
            return self.sample(job.sampler, row), None, None
        import numpy as np

        logits = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))
        lse = 0.0
        top: tuple[TopLogprob, ...] = ()
        if job.logprobs:  # from the raw distribution, before the mask changes the row
            peak = float(logits.max())
            lse = peak + float(np.log(np.exp(logits - peak).sum()))
            k = job.params.logprobs or 0
            if k:
                best = np.argpartition(logits, -k)[-k:]
                best = best[np.argsort(-logits[best], kind="stable")]
                top = tuple(
                    TopLogprob(token_id=int(t), bytes=self.piece(int(t)), logprob=float(logits[t]) - lse) for t in best
                )
        if job.constraint is not None and not job.constraint.apply(logits, mask):
            # Nothing is allowed (the matcher failed): end the generation as the language would.
            token = int(self.lib.llama_vocab_eos(self.vocab))
        else:
            token = self.sample(job.sampler, row)
        if not job.logprobs:
            return token, None, None
        logprob = float(logits[token]) - lse
        entry = None
        if job.params.logprobs is not None:
            entry = TokenLogprob(token_id=token, bytes=self.piece(token), logprob=logprob, top=top)
        return token, logprob, entry

    def next_logits(self, state: SeqState) -> list[float]:
        """The model's next-token logits after `state` (for checks that state equals text)."""
        with self.lock:
            self.slots.attach(state)
            self.unevaluate_last(state)
            self.evaluate(state, len(state.tokens))
            ptr = self.lib.llama_get_logits_ith(self.ctx, -1)
            return [float(ptr[i]) for i in range(self.n_vocab)]

    # --- embeddings --------------------------------------------------------------------------------------
    def embed(self, texts: list[str], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        """Mean of the last hidden states over each text's tokens, L2-normalized.

        Bounded work under the model lock: each text runs in batch-size chunks, one chunk per lock hold, so
        generations interleave with a long embeddings call; `check()` runs between chunks and raises to stop it
        (a cancelled request or a passed deadline). The mean is computed here (pooling none) because llama.cpp's
        own mean pooling needs a whole sequence in one batch.
        """
        import numpy as np

        policy.check_embedding_texts(texts)
        lib = self.lib
        ctx = self._embedding_context()
        n_embd = lib.llama_model_n_embd(self.model)
        vectors: list[list[float]] = []
        total = 0
        for index, text in enumerate(texts):
            tokens = self.tokenize(text)
            total += len(tokens)
            if len(tokens) > self.n_ctx:
                raise InvalidInput(
                    f"text[{index}] is {len(tokens)} tokens but the context window is {self.n_ctx} tokens"
                )
            summed = np.zeros(n_embd, dtype=np.float64)
            for start in range(0, len(tokens), self.n_batch):
                if check is not None:
                    check()
                chunk = tokens[start : start + self.n_batch]
                with self.lock:
                    if start == 0:
                        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
                    batch = self._embed_batch
                    for i, tok in enumerate(chunk):
                        batch.token[i] = tok
                        batch.pos[i] = start + i
                        batch.n_seq_id[i] = 1
                        batch.seq_id[i][0] = 0
                        batch.logits[i] = 1
                    batch.n_tokens = len(chunk)
                    rc = lib.llama_decode(ctx, batch)
                    if rc != 0:
                        raise EngineError(f"llama_decode failed with code {rc} while embedding text[{index}]")
                    rows = np.ctypeslib.as_array(lib.llama_get_embeddings(ctx), shape=(len(chunk), n_embd))
                    summed += rows.sum(axis=0, dtype=np.float64)
            mean = summed / max(1, len(tokens))
            norm = float(np.linalg.norm(mean)) or 1.0
            vectors.append([float(v) for v in mean / norm])
        return EmbeddingsResult(embeddings=vectors, prompt_token_count=total)

    def _embedding_context(self) -> Any:
        with self.lock:
            if self._embed_ctx is None:
                lib = self.lib
                cparams = lib.llama_context_default_params()
                cparams.n_ctx = self.n_ctx
                cparams.n_batch = self.n_batch
                cparams.n_ubatch = self.n_batch
                cparams.n_seq_max = 1
                cparams.n_threads = self.config.threads
                cparams.n_threads_batch = self.config.threads
                cparams.embeddings = True
                cparams.pooling_type = lib.LLAMA_POOLING_TYPE_NONE
                cparams.no_perf = True
                self._embed_ctx = lib.llama_init_from_model(self.model, cparams)
                if not self._embed_ctx:
                    raise EngineError(f"llama.cpp could not create an embeddings context for {self.name}")
                self._embed_batch = lib.llama_batch_init(self.n_batch, 0, 1)
            return self._embed_ctx

    def close(self) -> None:
        lib = self.lib
        self.scheduler.stop()  # outside the lock: its last step needs it
        self.scheduler.masks.close()
        with self.lock:
            self.slots.close()
            if self._embed_ctx:
                lib.llama_batch_free(self._embed_batch)
                lib.llama_free(self._embed_ctx)
                self._embed_ctx = None
            if self.ctx:
                lib.llama_batch_free(self.batch)
                lib.llama_free(self.ctx)
                lib.llama_model_free(self.model)
                self.ctx = None


class LlamaCppEngine:
    def __init__(
        self, models: Mapping[str, ModelConfig], cache_dir: Path, note: Callable[[str], None] | None = None
    ) -> None:
        self._note = note
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
                started = time.monotonic()
                loaded = self._loaded[name] = LlamaModel(name, config, path)
                if self._note is not None:
                    self._note(f"loaded model {name} in {time.monotonic() - started:.1f} s")
            return loaded

    def list_models(self) -> list[ModelInfo]:
        with self._load_lock:
            loaded = dict(self._loaded)
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
        return self.model(model).tokenize(text)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> LlamaGeneration:
        policy.validate_params(params)
        m = self.model(model)
        tokens = m.tokenize(prompt)
        if not tokens:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        policy.check_prompt_fits(len(tokens), m.n_ctx)
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
        m.check_swap_room()
        return LlamaSequence(m)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(self, model: str, texts: list[str], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        return self.model(model).embed(texts, check)

    def close(self) -> None:
        with self._load_lock:
            for m in self._loaded.values():
                m.close()
            self._loaded.clear()
