"""`LlamaDecoder`: the decoder protocol (engine/decoder.py) on llama.cpp, through llama-cpp-python's low-level API.

One llama context per model holds `slots` sequence slots (a seq_id each) in a unified KV cache of
`context-length × slots` cells, so every resident sequence can use its whole window and `seq_cp` shares cells
instead of copying them. Callers hold the model's lock around every call (llama.cpp contexts are not
thread-safe).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.limits import EMBEDDING_SEQUENCES, EMBEDDING_SHARED_TOKENS, MAX_BYTES_PER_TOKEN
from llmhost.domain.types import EmbeddingInput, EmbeddingsResult, InferencingParams, check_text_length
from llmhost.engine.local import compute
from llmhost.engine.local.backend_greedy import LLAMA_TOKEN_NULL, GreedyChains, use_backend_sampling
from llmhost.engine.local.decoder import BatchRow, Sampler
from llmhost.engine.local.embedding import choose_pooling, combine, next_group
from llmhost.engine.local.gguf import GgufError, matrix_types
from llmhost.engine.local.sampling import build_sampler, penalty_window, sampler_seed

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

log = logging.getLogger(__name__)

_llama: Any = None
_log_callback: Any = None  # kept referenced: llama.cpp holds a raw pointer to it
_backend_lock = threading.Lock()
# llama_vocab_type values whose tokens are pieces of the input text: SPM 1, BPE 2, RWKV 5.
_TEXT_PIECE_VOCABS = (1, 2, 5)
# Which weight types' matrix products give a row the same bits however many rows the micro-batch holds, on
# ggml's CPU backend (deterministic mode batches rows by this, `rows_alike`). Q4_0, Q4_1, Q5_0 and Q8_0: at any
# number of rows (checked bit for bit, 1 to 64 rows). K-quants and i-quants: up to 7 rows; from 8 rows on they
# take a tiled kernel (ggml-cpu/tiled, `ggml_tiled_min_batch`) that rounds otherwise than the one-row kernel.
_ROW_EXACT_TYPES = frozenset({2, 3, 6, 8})  # enum ggml_type
_TILED_TYPES = frozenset({10, 11, 12, 13, 14, 16, 17, 18, 19, 21, 22, 23, 29})
_CPU_TILED_MIN_ROWS = 8
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


def rows_alike(matrix_types: set[int], n_batch: int, offloaded: bool) -> int:
    """The most tokens a decode call may hold for every row in it to get the bits it gets alone, given the
    model's matrix weight types (gguf.matrix_types). 1 where that was not measured: other weight types (F16's
    one-row and many-row kernels differ), and layers offloaded to a GPU, whose kernels are chosen by batch size."""
    if offloaded:
        return 1
    if matrix_types <= _ROW_EXACT_TYPES:
        return n_batch
    if matrix_types <= _ROW_EXACT_TYPES | _TILED_TYPES:
        return _CPU_TILED_MIN_ROWS - 1
    return 1


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


class _BatchFields:
    """numpy views of a `llama_batch`'s arrays, so a step fills them with a few slice assignments instead of
    five ctypes writes per token. Each token's `seq_id` pointer is pointed into one array of our own (one sequence
    per token), and put back before `llama_batch_free` frees them (`close`)."""

    def __init__(self, batch: Any, size: int) -> None:
        import numpy as np

        def view(pointer: Any, ctype: Any, dtype: Any) -> Any:
            return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctype)), shape=(size,)).view(dtype)

        self._np = np
        self.token = view(batch.token, ctypes.c_int32, np.int32)
        self.pos = view(batch.pos, ctypes.c_int32, np.int32)
        self.logits = view(batch.logits, ctypes.c_int8, np.int8)
        view(batch.n_seq_id, ctypes.c_int32, np.int32)[:] = 1
        self.seq = np.zeros(size, dtype=np.int32)
        self._pointers = view(batch.seq_id, ctypes.c_uint64, np.uint64)
        self._owned = self._pointers.copy()
        self._pointers[:] = self.seq.ctypes.data + 4 * np.arange(size, dtype=np.uint64)

    def fill(self, rows: Sequence[BatchRow], logits_at: set[int]) -> int:
        """Write the rows (and which batch indices keep logits); returns the token count."""
        if len(rows) == 1 and len(rows[0][2]) == 1 and logits_at == {0}:  # one stream's next token: 4 stores
            slot, start, tokens = rows[0]
            self.token[0] = tokens[0]
            self.pos[0] = start
            self.seq[0] = slot
            self.logits[0] = 1
            return 1
        if len(rows) == 1:
            slot, start, tokens = rows[0]
            n = len(tokens)
            self.token[:n] = tokens
            self.pos[:n] = self._np.arange(start, start + n, dtype=self._np.int32)
            self.seq[:n] = slot
        else:
            token: list[int] = []
            pos: list[int] = []
            seq: list[int] = []
            for slot, start, tokens in rows:
                count = len(tokens)
                token += tokens
                pos += range(start, start + count)
                seq += [slot] * count
            n = len(token)
            self.token[:n] = token
            self.pos[:n] = pos
            self.seq[:n] = seq
        self.logits[:n] = 0
        if logits_at:
            self.logits[list(logits_at)] = 1
        return n

    def close(self) -> None:
        """Give the batch its own seq_id pointers back (llama_batch_free frees them)."""
        self._pointers[:] = self._owned


class LlamaSampler:
    """A llama.cpp sampler chain (see sampling.build_sampler) on the decoder's context."""

    plain_greedy = False

    def __init__(self, decoder: LlamaDecoder, params: InferencingParams) -> None:
        self._lib = decoder.lib
        self._ctx = decoder.ctx
        self._chain = build_sampler(decoder.lib, decoder.n_vocab, params, decoder.n_ctx)

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self._chain, token)

    def sample(self, row: int) -> int:
        return int(self._lib.llama_sampler_sample(self._chain, self._ctx, row))

    def close(self) -> None:
        if self._chain is not None:
            self._lib.llama_sampler_free(self._chain)
            self._chain = None


class LlamaVocabCalls:
    """The vocabulary calls of a loaded llama.cpp model (`lib`, `model`, `vocab`): shared by the decoder and the
    vocabulary-only load remote models use (llama_vocab.py), so both tokenize and template alike."""

    lib: Any
    model: Any
    vocab: Any

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

    _max_token_bytes: int | None = None

    def max_token_bytes(self) -> int:
        """The most bytes of text one token stands for (control tokens by their text, as `tokenize` parses them):
        a text of N bytes has at least N / this many tokens. Computed once (~0.5 s for 262k tokens); tokenizers
        that normalize text (WordPiece, Unigram) have no such bound and get `MAX_BYTES_PER_TOKEN`."""
        if self._max_token_bytes is None:
            longest = 1
            if int(self.lib.llama_vocab_type(self.vocab)) in _TEXT_PIECE_VOCABS:
                buf = ctypes.create_string_buffer(256)
                for token in range(int(self.lib.llama_vocab_n_tokens(self.vocab))):
                    n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
                    longest = max(longest, n if n >= 0 else -n)
            else:
                longest = MAX_BYTES_PER_TOKEN
            self._max_token_bytes = longest
        return self._max_token_bytes

    _pieces: dict[int, bytes] | None = None
    _eog: dict[int, bool] | None = None

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens render as nothing); remembered, as every generated token asks."""
        if self._pieces is None:
            self._pieces = {}
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token)
        return piece

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        if self._eog is None:
            self._eog = {}
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self.lib.llama_vocab_is_eog(self.vocab, token))
        return eog

    def eos(self) -> int:
        return int(self.lib.llama_vocab_eos(self.vocab))

    def meta_string(self, key: str) -> str | None:
        """A string from the GGUF metadata (None when absent)."""
        size = 8192
        while True:
            buf = ctypes.create_string_buffer(size)
            n = int(self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, size))
            if n < 0:
                return None
            if n < size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1

    def special_text(self, token: int) -> str:
        """A control token's text (`<bos>`), as templates write it ("" for no token)."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return bytes(buf.raw[:n]).decode("utf-8", "replace")

    def chat_template(self) -> TemplateInfo:
        from llmhost.engine.chat_template import TemplateInfo

        lib, vocab = self.lib, self.vocab
        eot = int(lib.llama_vocab_eot(vocab))
        return TemplateInfo(
            source=self.meta_string("tokenizer.chat_template") or "",
            origin="the model file's tokenizer.chat_template",
            bos_token=self.special_text(int(lib.llama_vocab_bos(vocab))),
            eos_token=self.special_text(int(lib.llama_vocab_eos(vocab))),
            add_bos=bool(lib.llama_vocab_get_add_bos(vocab)),
            extra_stops=(self.special_text(eot),) if eot >= 0 else (),
        )


class LlamaDecoder(LlamaVocabCalls):
    def __init__(self, name: str, config: ModelConfig, path: Path) -> None:
        lib = llama_lib()
        self.name = name
        self.config = config
        self.lib = lib
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
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        arch = self.meta_string("general.architecture") or ""
        # An encoder (BERT, nomic-bert) says its attention is non-causal; llama.cpp's llama_model_has_encoder says
        # false for BERT, so the GGUF key is what tells.
        self.non_causal = self.meta_string(f"{arch}.attention.causal") == "false"
        self.embeddings_only = config.embeddings_only or self.non_causal
        gguf_pooling = self.meta_string(f"{arch}.pooling_type")
        try:
            self.pooling = choose_pooling(name, config.pooling, int(gguf_pooling) if gguf_pooling else None)
        except ValueError as error:
            lib.llama_model_free(self.model)
            raise EngineError(str(error)) from None
        self.n_ctx = config.context_length
        if self.non_causal:
            # An encoder reads a text in one micro-batch (llama.cpp asserts n_ubatch >= n_tokens), and its learned
            # positions end at its training context: the window is the smaller of the two, and batch = ubatch = it.
            self.n_ctx = min(self.n_ctx, int(lib.llama_model_n_ctx_train(self.model)))
            self.n_batch = self.n_ctx
        else:
            self.n_batch = min(config.batch_size, self.n_ctx)
        self.n_slots = config.slots
        # Texts per embeddings decode call: llama.cpp reserves an output per sequence in a micro-batch, and asserts
        # (aborting the process) when the sequences outnumber the micro-batch's tokens.
        self.embed_sequences = min(EMBEDDING_SEQUENCES, self.n_batch)
        self._embed_ctx: Any = None
        self._embed_fields: _BatchFields | None = None
        self._embed_batch: Any = None
        self.greedy_chains: GreedyChains | None = None
        if self.embeddings_only:  # no generation: no generation context, slots or KV cache
            self.ctx = None
            self.invariant_rows = 1
            return
        # Deterministic mode's bound on one-token rows per call (the default mode does not use it).
        self.invariant_rows = 1
        if config.deterministic:
            try:
                types = matrix_types(path)
            except (GgufError, OSError) as error:  # llama.cpp read it: unlikely; then every row is decoded alone
                log.warning("%s: weight types unknown (%s): deterministic mode decodes each row alone", name, error)
            else:
                self.invariant_rows = rows_alike(types, self.n_batch, config.n_gpu_layers != 0)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.n_ctx * config.slots
        # llama.cpp reserves an output per sequence and asserts (aborting the process) when the sequences outnumber
        # a micro-batch's tokens: the context's batch is at least `slots` (our calls still hold n_batch tokens).
        cparams.n_batch = max(self.n_batch, config.slots)
        cparams.n_ubatch = max(self.n_batch, config.slots)
        cparams.n_seq_max = config.slots
        # Default: one cell pool for all slots, so seq_cp (fork, prefix reuse) copies no data. Deterministic mode:
        # a stream per slot, so a sequence's cells sit in position order wherever the others' are.
        self.unified = not config.deterministic
        cparams.kv_unified = self.unified
        if config.deterministic:
            # Flash attention on CPU splits a lone one-token row's KV span among threads (once it spans 512
            # cells) but runs a row batched with others over its cells in one pass: they round differently.
            # Without it, a row's sums run over its own cells in index order either way.
            cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
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
        offloaded = config.n_gpu_layers != 0 and bool(lib.llama_supports_gpu_offload())
        if use_backend_sampling(config.backend_sampling, offloaded):
            self.greedy_chains = GreedyChains(config.slots)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self._fields = _BatchFields(self.batch, self.n_batch)
        import numpy as np

        self._np = np
        # llama_get_logits through a prototype that returns the address as an int: the binding's returns a float
        # pointer, whose `.contents` and `addressof` cost more than the call.
        function = ctypes.cast(lib.llama_get_logits, ctypes.c_void_p).value
        assert function is not None
        self._logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(function)
        self._outputs: list[int] = []  # the batch indices of the last decode's logits rows, in output order
        self._output_row: dict[int, int] = {}  # batch index -> its row in the logits block
        self._block: Any = None  # numpy view of the last decode's logits rows (read lazily: see `_logits_block`)
        self._views: dict[tuple[int, int], Any] = {}  # (address, rows) -> a view of llama.cpp's logits buffer

    # --- decoding ----------------------------------------------------------------------------------------
    def decode(self, rows: Sequence[BatchRow], logits_at: set[int]) -> int:
        batch = self.batch
        batch.n_tokens = self._fields.fill(rows, logits_at)
        outputs = sorted(logits_at)
        if outputs != self._outputs:
            self._outputs = outputs
            self._output_row = {index: row for row, index in enumerate(outputs)}
        self._block = None
        if self.greedy_chains is not None:
            self.greedy_chains.before_decode(self.lib, self.ctx, rows, logits_at)
        rc = int(compute.run(self.lib.llama_decode, self.ctx, batch))
        if rc not in (0, 1):
            raise EngineError(f"llama_decode failed with code {rc} (context of {self.n_ctx} tokens per sequence)")
        return rc

    def _logits_block(self) -> Any:
        """The last decode's logits rows, in batch order, as one writable (outputs × vocabulary) float32 array.
        `llama_get_logits` is called once per decode: it puts rows that llama.cpp computed out of order back in
        batch order. The view over its buffer is kept while the buffer stays where it is (llama.cpp moves it
        only when a decode needs more output rows than it holds): building a numpy row from a ctypes pointer
        costs more than a greedy token's whole bookkeeping."""
        block = self._block
        if block is None:
            key = (self._logits_address(self.ctx), len(self._outputs))
            block = self._views.get(key)
            if block is None:
                if len(self._views) > 16:  # old buffers' views (the buffer moved, or many row counts)
                    self._views.clear()
                array = (ctypes.c_float * (key[1] * self.n_vocab)).from_address(key[0])
                block = self._views[key] = self._np.frombuffer(memoryview(array), dtype="float32").reshape(key[1], -1)
            self._block = block
        return block

    def logits(self, index: int) -> Any:
        row = index if index < 0 else self._output_row.get(index)
        if row is None:  # not a row the last decode kept: llama.cpp's own lookup reports it
            import numpy as np

            address = ctypes.addressof(self.lib.llama_get_logits_ith(self.ctx, index).contents)
            return np.frombuffer(memoryview((ctypes.c_float * self.n_vocab).from_address(address)), dtype=np.float32)
        return self._logits_block()[row]

    def argmax_rows(self, rows: Sequence[int]) -> list[int]:
        chains = self.greedy_chains
        if chains is not None and chains.bound:  # chosen in the graph (a row it did not sample: from its logits)
            sampled = self.lib.llama_get_sampled_token_ith
            tokens = [int(sampled(self.ctx, row)) for row in rows]
            if LLAMA_TOKEN_NULL not in tokens:
                return tokens
            pairs = zip(tokens, rows, strict=True)
            return [int(self.logits(row).argmax()) if token == LLAMA_TOKEN_NULL else token for token, row in pairs]
        if list(rows) != self._outputs:
            return [int(self.logits(row).argmax()) for row in rows]
        # Every output row, in order: one argmax over the block. (Two threads, each on half the rows, were no faster
        # in bench/gpu_speed.py's 32 streams: the rows are read at the memory's speed either way.)
        return self._logits_block().argmax(1).tolist()

    def new_sampler(self, params: InferencingParams) -> Sampler:
        """numpy on the logits row where it covers the params (host_sampler.py: ~20 µs for greedy against
        llama.cpp's 0.5 ms candidate copy of a 262k vocabulary), else llama.cpp's chain."""
        from llmhost.engine.local import host_sampler

        if host_sampler.eligible(params, self.n_vocab):
            window = penalty_window(params, self.n_ctx)
            return host_sampler.HostSampler(self.logits, params, window, sampler_seed(params.seed))
        return LlamaSampler(self, params)

    # --- the KV cache ------------------------------------------------------------------------------------
    def seq_rm(self, slot: int, start: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, slot, start, -1)

    def seq_cp(self, source: int, target: int, end: int) -> None:
        if self.unified:
            self.lib.llama_memory_seq_cp(self.memory, source, target, 0, end)
            return
        # Across streams llama.cpp copies whole streams only (cells keep their places): copy, then cut.
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)
        if end >= 0:
            self.seq_rm(target, end)

    def save(self, slot: int) -> bytes | None:
        size = self.lib.llama_state_seq_get_size(self.ctx, slot)
        buf = (ctypes.c_uint8 * size)()
        written = self.lib.llama_state_seq_get_data(self.ctx, buf, size, slot)
        return bytes(buf[:written]) if written else None

    def restore(self, slot: int, data: bytes) -> bool:
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return bool(self.lib.llama_state_seq_set_data(self.ctx, buf, len(data), slot) == len(data))

    # --- llama.cpp-only extras: embeddings and the vocabulary for structured output -----------------------
    def constraint_compiler(self) -> Any:
        from llmhost.engine.local.constraints import ConstraintCompiler

        return ConstraintCompiler.from_llama_vocab(self.lib, self.vocab, self.n_vocab)

    def embed(
        self,
        texts: Sequence[EmbeddingInput],
        lock: threading.RLock,
        check: Callable[[], None] | None = None,
        shared: Callable[[], bool] | None = None,
    ) -> EmbeddingsResult:
        """One L2-normalized vector per text (a token-id input: its ids, as they are), pooled as the model pools
        (`self.pooling`: the config's, the GGUF's, or mean). The usage counts every token evaluated, special
        tokens included.

        Texts share decode calls, one sequence id each (embedding.next_group: `batch-size` tokens and
        EMBEDDING_SEQUENCES texts a call, EMBEDDING_SHARED_TOKENS while `shared()` says generations wait), pooled by
        llama.cpp (llama_get_embeddings_seq). A causal model's text longer than its batch runs in chunks whose pooled
        vectors are combined (embedding.combine); an encoder's window is its batch, so its texts never are. Each
        decode call holds `lock` once, so generations interleave with a long embeddings call; `check()` runs before
        each call and raises to stop it (a cancelled request or a passed deadline). Every text is tokenized and
        checked before any work.
        """
        for index, text in enumerate(texts):  # before any work: a text too long to fit is refused untokenized
            if isinstance(text, str):
                check_text_length(f"text[{index}]", len(text), self.n_ctx, self.n_ctx, self.max_token_bytes())
        tokenized = [self.tokenize(text, True) if isinstance(text, str) else list(text) for text in texts]
        for index, tokens in enumerate(tokenized):
            if len(tokens) > self.n_ctx:
                what = f"text[{index}]" if isinstance(texts[index], str) else f"inputs[{index}]"
                raise InvalidInput(f"{what} is {len(tokens)} tokens but the context window is {self.n_ctx} tokens")
        import numpy as np

        n_embd = int(self.lib.llama_model_n_embd(self.model))
        pooled = np.zeros((len(texts), n_embd), dtype=np.float64)  # an empty token list stays a zero vector
        lengths = [len(tokens) for tokens in tokenized]
        start = 0
        while start < len(lengths):
            if check is not None:
                check()
            budget = EMBEDDING_SHARED_TOKENS if shared is not None and shared() else self.n_batch
            end = next_group(lengths, start, budget, self.embed_sequences)
            group = [index for index in range(start, end) if lengths[index]]  # an empty input stays a zero vector
            start = end
            if not group:
                continue
            if lengths[group[0]] > self.n_batch:
                pooled[group[0]] = self._embed_chunked(tokenized[group[0]], lock, check)
                continue
            with lock:
                vectors = self._decode_pooled([(seq, 0, tokenized[index]) for seq, index in enumerate(group)])
            pooled[group] = vectors
            time.sleep(0)  # let a waiting decode step take the lock
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalized = pooled / np.where(norms > 0, norms, 1.0)
        return EmbeddingsResult(embeddings=normalized.tolist(), prompt_token_count=sum(map(len, tokenized)))

    def _embed_chunked(self, tokens: list[int], lock: threading.RLock, check: Callable[[], None] | None) -> Any:
        """A causal model's text over its batch size: batch-size chunks in sequence 0, one lock hold each."""
        parts = []
        for start in range(0, len(tokens), self.n_batch):
            if check is not None and start > 0:  # the caller checked before the first
                check()
            chunk = tokens[start : start + self.n_batch]
            with lock:
                parts.append((self._decode_pooled([(0, start, chunk)], clear=start == 0)[0], len(chunk)))
            time.sleep(0)
        return combine(self.pooling, parts)

    def _decode_pooled(self, rows: list[BatchRow], clear: bool = True) -> Any:
        """Decode `rows` (sequence id, first position, tokens) in the embedding context in one call; each row's
        pooled vector, in order (float64). Lock held."""
        import numpy as np

        lib = self.lib
        ctx = self._embedding_context()
        memory = lib.llama_get_memory(ctx)  # NULL for an encoder: it keeps no KV cache
        if clear and memory:
            lib.llama_memory_clear(memory, True)
        fields = self._embed_fields
        assert fields is not None
        n = fields.fill(rows, set())
        fields.logits[:n] = 1  # pooling reads every token's output
        self._embed_batch.n_tokens = n
        rc = int(compute.run(lib.llama_decode, ctx, self._embed_batch))
        if rc != 0:
            raise EngineError(f"llama_decode failed with code {rc} while computing embeddings with {self.name}")
        n_embd = int(lib.llama_model_n_embd(self.model))
        out = np.empty((len(rows), n_embd), dtype=np.float64)
        for i, (seq, _, _) in enumerate(rows):
            pointer = lib.llama_get_embeddings_seq(ctx, seq)
            if not pointer:
                raise EngineError(f"llama.cpp gave no pooled embedding for sequence {seq} of {self.name}")
            out[i] = np.ctypeslib.as_array(pointer, shape=(n_embd,))
        return out

    def _embedding_context(self) -> Any:
        """The embedding context, created on first use (lock held): the model's pooling, `embed_sequences`
        sequences sharing one KV cell pool of the window (a long text in sequence 0 can fill it), batch =
        micro-batch (an encoder needs a text in one micro-batch)."""
        if self._embed_ctx is None:
            lib = self.lib
            cparams = lib.llama_context_default_params()
            cparams.n_ctx = self.n_ctx
            cparams.n_batch = self.n_batch
            cparams.n_ubatch = self.n_batch
            cparams.n_seq_max = self.embed_sequences
            cparams.kv_unified = True
            cparams.n_threads = self.config.threads
            cparams.n_threads_batch = self.config.threads
            cparams.embeddings = True
            cparams.pooling_type = self.pooling
            cparams.no_perf = True
            ctx = lib.llama_init_from_model(self.model, cparams)
            if not ctx:
                raise EngineError(f"llama.cpp could not create an embeddings context for {self.name}")
            self._embed_batch = lib.llama_batch_init(self.n_batch, 0, 1)
            self._embed_fields = _BatchFields(self._embed_batch, self.n_batch)
            self._embed_ctx = ctx
        return self._embed_ctx

    def close(self) -> None:
        lib = self.lib
        if self._embed_ctx:
            assert self._embed_fields is not None
            self._embed_fields.close()
            lib.llama_batch_free(self._embed_batch)
            lib.llama_free(self._embed_ctx)
            self._embed_ctx = None
        if self.ctx:
            self._fields.close()
            lib.llama_batch_free(self.batch)
            lib.llama_free(self.ctx)
            self.ctx = None
            if self.greedy_chains is not None:
                self.greedy_chains.close(lib)
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None
