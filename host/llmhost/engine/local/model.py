"""`EngineModel`: one loaded model wired from its parts — a decoder (engine/decoder.py), the slot pool, the
scheduler — under one lock. The parts never reach back into a backend: llama.cpp is only behind the decoder, so
the same model runs on `FakeDecoder` in unit tests.

Every decoder call runs under the model's lock; the scheduler decodes every running generation in one batch per
step (scheduler.py); slots.py keeps the slots; llama_sequence.py has the guest-facing sequences.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, InvalidInput, ModelNotSupported
from llmhost.domain.limits import DETERMINISTIC_CHUNK, model_key
from llmhost.domain.types import (
    Constraint,
    EmbeddingInput,
    EmbeddingsResult,
    InferencingParams,
    TokenLogprob,
    TopLogprob,
    check_embedding_texts,
    check_embedding_tokens,
    check_text,
    check_text_length,
)
from llmhost.engine.admission import AdmissionQueue
from llmhost.engine.local import compute
from llmhost.engine.local.backend_greedy import GreedyChains
from llmhost.engine.local.constraint_mask import TokenConstraint
from llmhost.engine.local.decoder import BatchRow, Decoder
from llmhost.engine.local.job import Row
from llmhost.engine.local.model_lock import EmbeddingTurns, ModelLock
from llmhost.engine.local.planning import aligned_after, row_length
from llmhost.engine.local.scheduler import Scheduler
from llmhost.engine.local.sequence_state import SeqState
from llmhost.engine.local.slots import SlotPool
from llmhost.engine.observer import NO_OBSERVER, ModelGauges, ModelObserver
from llmhost.engine.text import attribute_text

if TYPE_CHECKING:
    from llmhost.engine.local.job import LlamaGeneration

# What an embeddings call waits for in the admission queue (`Ticket.needs`): the model's one embedding context,
# apart from its sequence slots, so that generations never queue behind embeddings calls.
EMBEDDING_CONTEXT = "embedding-context"


class EngineModel:
    def __init__(self, name: str, config: ModelConfig, decoder: Decoder, observer: ModelObserver = NO_OBSERVER) -> None:
        self.name = name
        self.observer = observer
        self.config = config
        self.decoder = decoder
        self.lock = ModelLock()
        self.n_vocab = decoder.n_vocab
        self.n_ctx = decoder.n_ctx  # the window of one sequence
        self.n_batch = decoder.n_batch
        # Backend sampling (llama_decoder, backend_greedy.py): plain greedy tokens are chosen in the compute graph.
        self.greedy_chains: GreedyChains | None = getattr(decoder, "greedy_chains", None)
        # An embedding-only model (a non-causal GGUF, or `embeddings-only = true`) refuses every generation.
        self.embeddings_only = bool(getattr(decoder, "embeddings_only", config.embeddings_only))
        # Deterministic mode's row alignment (planning.py); None: rows are cut by the batch budget alone.
        self.chunk = min(DETERMINISTIC_CHUNK, self.n_batch) if config.deterministic else None
        # Decode threads on every core the process may use, and no GPU doing the work (see scheduler.READER_TURN_S)
        self.cpu_bound = config.n_gpu_layers == 0 and config.threads >= len(os.sched_getaffinity(0))
        # Every kind of work waits for slots (or the embedding context) in this one queue, each in arrival order.
        slots = f"all {decoder.n_slots} sequence slots of {name}"
        self.admission = AdmissionQueue(self.lock, slots, model_key(name, "slots"), on_wait=observer.admission_wait)
        self.scheduler = Scheduler(self)
        self.slots = SlotPool(decoder, decoder.n_slots, self.lock, name, on_free=self._freed, chunk=self.chunk)
        self._embedding = False  # the embedding context is in use
        self.embedding_batches = 0  # embeddings decode calls run so far (tests: how generations share the model)
        self._constraints: Any = None  # the model's ConstraintCompiler, created on first use (llguidance)
        self._constraints_lock = threading.Lock()
        # Tokens run through the model so far (prefill and decode): what generations cost, for tests and stats.
        self.evaluated_tokens = 0
        self.decode_seconds = 0.0  # wall time spent decoding (benchmarks subtract it from latencies)
        self.decoding = False  # inside a decode now
        self.decode_threads: list[int] = []  # the thread of each decode, while `record_decode_threads` is on
        self.record_decode_threads = False
        self._all_rows: dict[int, set[int]] = {}  # n -> {0, ..., n-1}: the logits rows of a burst's step
        observer.attach(self.gauges)

    def gauges(self) -> ModelGauges:
        """The model's state now, for metrics: plain reads, no lock (a scrape never waits behind a decode)."""
        return ModelGauges(
            slots=self.slots.count,
            slots_busy=self.slots.busy,
            admission_waiting=self.admission.waiting,
            swapped_bytes=self.slots.swapped_bytes,
            decode_steps=self.scheduler.steps,
            decode_rows=self.scheduler.rows,
        )

    # --- state -------------------------------------------------------------------------------------------
    def _freed(self) -> None:
        """A slot freed up or became evictable: the head of the queue may take it, and the scheduler may step."""
        self.admission.changed()
        self.scheduler.wake()

    def attach(self, state: SeqState, kind: str, check: Callable[[], None] | None = None) -> None:
        """Give `state` a slot, waiting in the admission queue in turn (`check()` may raise to stop waiting).
        Returns with the lock held (callers hold it around the work on the slot)."""
        was_busy = state.busy

        def take() -> bool:
            if not self.slots.attach(state):
                return False
            # Reserved (not evicted by the next ticket's take) until this caller, woken, holds the lock again.
            state.busy = True
            return True

        with self.lock:
            self.admission.enter(kind, take, check)
            state.busy = was_busy

    def check_swap_room(self) -> None:
        """Refuse a new sequence while swapped-out sequences hold the model's host-memory cap (each new one may
        push another out to host memory)."""
        limit = self.config.max_swapped_mb * 1024 * 1024
        if self.slots.swapped_bytes >= limit:
            raise InvalidInput(
                f"model {self.name!r} holds {self.slots.swapped_bytes / 2**20:.0f} MB of swapped-out sequences, its "
                f"limit (close some sequences, or raise `{model_key(self.name, 'max-swapped-mb')}` in the config)"
            )

    def check_generates(self, what: str) -> None:
        """Refuse `what` (a generation of any kind) on an embedding-only model, saying why."""
        if not self.embeddings_only:
            return
        if getattr(self.decoder, "non_causal", False):
            why = "its GGUF says its attention is non-causal (an encoder)"
        else:
            why = f"its config sets `{model_key(self.name, 'embeddings-only')} = true`"
        raise ModelNotSupported(
            f"model {self.name!r} is an embedding-only model ({why}): it cannot {what}; use it for embeddings "
            "and a generative model for text"
        )

    # --- vocabulary --------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, room: int | None = None, what: str = "text") -> list[int]:
        """`room`: the tokens `text` may take; a text too long for them is refused before it is tokenized (the
        caller still checks the count)."""
        if room is not None:
            check_text_length(what, len(text), room, self.n_ctx, self.decoder.max_token_bytes())
        check_text(text, what)  # a Python caller's lone surrogate (a sequence's append): InvalidInput, not a crash
        return self.decoder.tokenize(text, add_special)

    def piece(self, token: int) -> bytes:
        return self.decoder.piece(token)

    def texts_of(self, tokens: list[int], text: str) -> list[str]:
        return attribute_text([self.piece(t) for t in tokens], text)

    def is_eog(self, token: int) -> bool:
        return self.decoder.is_eog(token)

    # --- decoding ----------------------------------------------------------------------------------------
    def evaluate(self, state: SeqState, upto: int) -> None:
        """Run tokens[n_kv:upto] of `state` through the model now, in batch-size chunks (the logits of the last
        one are row -1 afterwards). For appends; generations go through the scheduler. Lock held, attached."""
        while state.n_kv < upto:
            count = row_length(state.n_kv, upto - state.n_kv, self.n_batch, self.chunk)
            chunk = state.tokens[state.n_kv : state.n_kv + count]
            if self._decode([(state, chunk)], {len(chunk) - 1}) != 0:
                raise EngineError(f"no room in the KV cache of {self.name} for {len(chunk)} tokens")
            state.n_kv += len(chunk)
            state.evaluated += len(chunk)
            self.evaluated_tokens += len(chunk)

    def start_rows(self, rows: list[Row], overlap: bool = False) -> Callable[[], list[Row]]:
        """Start decoding one scheduler step: every row's tokens of its sequence in one batch. Rows that ask to
        sample get `sample_at` set to their batch index. The returned `wait()` (called once) gives the rows decoded.
        With `overlap` the decode runs on the compute thread and this returns once it is under way in C
        (compute.start): the caller works on meanwhile, on nothing that touches this model's context or makes
        another compute call. Without, the decode is done before this returns. When the decoder finds no room in
        the KV cache (code 1), the batch is shrunk (prefill chunks dropped from the end) and retried; what was left
        out runs next step."""
        plan: list[tuple[SeqState, list[int]]] = []
        logits_rows: set[int] = set()
        index = 0
        for row in rows:
            plan.append((row.job.state, row.tokens))
            index += len(row.tokens)
            if row.sample_at is not None:
                row.sample_at = index - 1
                logits_rows.add(index - 1)
        waiting = self._start_decode(plan, logits_rows, overlap) if rows else (lambda: 0)

        def wait() -> list[Row]:
            if waiting() == 0:
                for row in rows:
                    row.job.state.n_kv += len(row.tokens)
                    row.job.state.evaluated += len(row.tokens)
                    self.evaluated_tokens += len(row.tokens)
                return rows
            return self.start_rows(rows[: len(rows) // 2])() if len(rows) > 1 else []

        return wait

    def start_next(self, states: list[SeqState], overlap: bool = False) -> Callable[[], bool]:
        """One step of a burst (scheduler.py), the lean form of `start_rows` for the step that runs most often:
        each state's last token, whose logits are then output row `i` of state `i`. The returned `wait()` (called
        once) says whether it was decoded: False when the KV cache had no room, and nothing was (the planned path
        shrinks the batch). With `overlap` the decode runs on the compute thread and the caller works on meanwhile,
        as with `start_rows`."""
        rows = self._all_rows.get(len(states))
        if rows is None:
            rows = self._all_rows[len(states)] = set(range(len(states)))
        waiting = self._start_decode([(state, state.tokens[-1:]) for state in states], rows, overlap)

        def wait() -> bool:
            if waiting() != 0:
                return False
            for state in states:
                state.n_kv += 1
                state.evaluated += 1
            self.evaluated_tokens += len(states)
            return True

        return wait

    def _decode(self, plan: list[tuple[SeqState, list[int]]], logits_rows: set[int]) -> int:
        return self._start_decode(plan, logits_rows)()

    def _start_decode(
        self, plan: list[tuple[SeqState, list[int]]], logits_rows: set[int], overlap: bool = False
    ) -> Callable[[], int]:
        """`decoder.decode`, whose returned `wait()` gives its code. With `overlap` it runs on the compute thread
        (compute.py), the caller working on meanwhile; without, here at once (its C call alone goes to the compute
        thread): two thread hand-offs fewer around the decoder's own Python when nothing is to overlap."""
        batch: list[BatchRow] = []
        for state, tokens in plan:
            assert state.slot is not None
            batch.append((state.slot, state.n_kv, tokens))
        if self.greedy_chains is not None:  # which sequences' tokens the graph may choose (backend_greedy.py)
            self.greedy_chains.greedy = {state.slot for state, _ in plan if state.greedy and state.slot is not None}
        if self.record_decode_threads:
            self.decode_threads.append(threading.get_ident())
        started = time.perf_counter()
        self.decoding = True

        def ended() -> None:
            self.decoding = False
            self.decode_seconds += time.perf_counter() - started

        if overlap:
            waiting = compute.start(self.decoder.decode, batch, logits_rows)
        else:
            try:
                rc = self.decoder.decode(batch, logits_rows)
            except BaseException:
                ended()
                raise
            waiting = lambda: rc  # noqa: E731

        def wait() -> int:
            try:
                rc = waiting()
                if rc == 0 and self.chunk is not None:
                    for state, tokens in plan:
                        state.aligned = aligned_after(state.aligned, state.n_kv, len(tokens), self.chunk)
                return rc
            finally:
                ended()

        return wait

    def unevaluate_last(self, state: SeqState) -> None:
        """When every token of `state` is in the cache, drop the last one from it: its logits are gone once
        anything else ran, and evaluating it again is how to get them. Lock held, `state` attached."""
        if state.n_kv >= len(state.tokens):
            state.n_kv = len(state.tokens) - 1
            assert state.slot is not None
            self.decoder.seq_rm(state.slot, state.n_kv)

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
        factory = getattr(self.decoder, "constraint_compiler", None)
        if factory is None:
            raise InvalidInput(f"structured output is not available for {self.name} (its backend has no vocabulary)")
        with self._constraints_lock:
            if self._constraints is None:
                self._constraints = factory()
            compiler = self._constraints
        return compiler.start(constraint)

    def sample_row(self, job: LlamaGeneration, row: int, mask: Any) -> tuple[int, float | None, TokenLogprob | None]:
        """Sample `job`'s next token from output `row`: log-probabilities from the raw logits, then the
        constraint's mask, then the sampler chain. Returns (token, its raw logprob, its logprob entry)."""
        if not job.logprobs and job.constraint is None:
            if self.greedy_chains is not None and job.plain_greedy:  # its logits may not have come back
                return self.decoder.argmax_rows([row])[0], None, None
            return job.sampler.sample(row), None, None
        logits = self.decoder.logits(row)
        lse = 0.0
        top: tuple[TopLogprob, ...] = ()
        if job.logprobs:  # from the raw distribution, before the mask changes the row
            lse, top = self.top_logprobs(logits, job.params.logprobs or 0)
        if job.constraint is not None and not job.constraint.apply(logits, mask):
            # Nothing is allowed (the matcher failed): end the generation as the language would.
            token = self.decoder.eos()
        else:
            token = job.sampler.sample(row)
        if not job.logprobs:
            return token, None, None
        logprob = float(logits[token]) - lse
        entry = None
        if job.params.logprobs is not None:
            entry = TokenLogprob(token_id=token, bytes=self.piece(token), logprob=logprob, top=top)
        return token, logprob, entry

    def top_logprobs(self, logits: Any, k: int) -> tuple[float, tuple[TopLogprob, ...]]:
        """The log of the row's softmax denominator, and its `k` most likely tokens with their natural-log
        probabilities, best first (ties by token id)."""
        import numpy as np

        peak = float(logits.max())
        lse = peak + float(np.log(np.exp(logits - peak).sum()))
        if not k:
            return lse, ()
        if k == 1:  # a greedy guest loop's read: argmax is several times cheaper than a partition of the row
            best = np.array([int(np.argmax(logits))])
        else:
            best = np.argpartition(logits, -k)[-k:] if k < len(logits) else np.arange(len(logits))
        best = best[np.lexsort((best, -logits[best]))]
        return lse, tuple(
            TopLogprob(token_id=int(t), bytes=self.piece(int(t)), logprob=float(logits[t]) - lse) for t in best
        )

    def next_logits(self, state: SeqState) -> list[float]:
        """The model's next-token logits after `state` (for checks that state equals text)."""
        with self.lock:
            self.attach(state, "next-logits")
            self.unevaluate_last(state)
            self.evaluate(state, len(state.tokens))
            return [float(x) for x in self.decoder.logits(-1)]

    def embed(self, texts: Sequence[EmbeddingInput], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        check_embedding_texts(texts)
        check_embedding_tokens(texts, self.n_vocab, self.name)
        embed = getattr(self.decoder, "embed", None)
        if embed is None:
            raise InvalidInput(f"embeddings are not available for {self.name}")
        with self.lock:  # one embeddings call at a time uses the embedding context (queued apart from slot work)
            self.admission.enter("embeddings", self._take_embedding_context, check, needs=EMBEDDING_CONTEXT)
        try:
            # Each decode call takes the model lock in turn with the generations (model_lock.EmbeddingTurns);
            # `check` runs before each one (the deadline, a disconnect).
            return embed(texts, EmbeddingTurns(self), check, self.scheduler.generating)
        finally:
            with self.lock:
                self._embedding = False
            self.admission.changed()

    def _take_embedding_context(self) -> bool:
        if self._embedding:
            return False
        self._embedding = True
        return True

    def close(self) -> None:
        self.scheduler.stop()  # outside the lock: its last step needs it
        self.scheduler.masks.close()
        with self.lock:
            self.slots.close()
            self.decoder.close()
