"""Continuous batching: one thread per model decodes every active generation together.

Each step builds one batch: the next token of every generating slot, then prompt chunks of generations still
in prefill, up to the batch size (so a long prompt never stalls the others); decodes once; samples each slot
from its own row; hands each generation its events. A generation whose reader lags `LOOKAHEAD` events behind
is skipped, so an unread stream costs little, and a cancelled one stops before the next step. When decoding uses
every core, the readers a step woke get their turn before the next decode (`READER_TURN_S`). New generations
are admitted first come, first served, as slots free up.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import policy
from ..types import EngineError, FinishReason, InferencingParams, LlmError, StreamDone, StreamEvent, Usage
from .generation import GenerationText
from .sampling import build_sampler
from .sequence_state import SeqState, plan_rewind
from .slots import slots_busy_error

if TYPE_CHECKING:
    from .llamacpp import LlamaModel

log = logging.getLogger(__name__)

# Events a generation may run ahead of its reader. More than one: readers are threads that need a moment (and
# the GIL) to take their event after each step; with one, most would miss the next step and batches would
# shrink. Few: a stream nobody reads stops soon, and cancelling wastes at most this many decode steps.
LOOKAHEAD = 4

# When decoding uses every core, a reader handling its chunk during the next decode takes a core from one of
# llama.cpp's threads, and the others wait for it at each barrier of the graph: that slows the decode by several
# times the reader's own time. So after a step the scheduler gives the readers it woke their turn first (they
# take their chunk and come back to next()), for at most this long.
READER_TURN_S = 0.003


class LlamaGeneration:
    """One generation on a `SeqState`, driven by the model's scheduler; iterate it to read its events.

    `on_end(state)` runs once when it ends or is cancelled (after the rewind, for sequences), under the model
    lock: `retire` for a one-off request, `release` for a guest's sequence.
    """

    def __init__(
        self,
        model: LlamaModel,
        state: SeqState,
        params: InferencingParams,
        *,
        on_end: Callable[[SeqState], None],
        rewind: bool = False,
        logprobs: bool = False,
        reuse_prefix: bool = False,
    ) -> None:
        self.model = model
        self.state = state
        self.params = params
        self.on_end = on_end
        self.rewind = rewind
        self.logprobs = logprobs
        self.reuse_prefix = reuse_prefix
        self.base = len(state.tokens)
        self.text = GenerationText(params.stop, self.base, params.max_tokens)
        self.sampler: Any = None
        self.eog = False
        self.submitted_at = 0.0
        self.ended = False  # the scheduler no longer runs it (finished, failed or cancelled)
        self._events: collections.deque[StreamEvent | LlmError] = collections.deque()
        self._ready = threading.Condition()
        self._submitted = False
        self._exhausted = False
        self._delivered: list[str] = []  # chunk texts the reader took
        self._reader_blocked = False  # a reader is inside next(), waiting for an event

    @property
    def usage(self) -> Usage:
        return self.text.usage

    @property
    def reused_prompt_tokens(self) -> int:
        return self.state.reused

    # --- reader side -------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._exhausted:
            raise StopIteration
        if not self._submitted:
            self._submitted = True
            self.model.scheduler.submit(self)
        with self._ready:
            if not self._events:
                self._reader_blocked = True
                self._ready.notify_all()  # the scheduler may be waiting for this reader to come back
                self._ready.wait_for(lambda: bool(self._events))
                self._reader_blocked = False
            event = self._events.popleft()
        self.model.scheduler.wake()  # its slot may run again
        if isinstance(event, LlmError):
            self._exhausted = True
            raise event
        if isinstance(event, StreamDone):
            self._exhausted = True
        else:
            self._delivered.append(event.text)
        return event

    def close(self) -> None:
        """Cancel (if still running): no further decode steps; the state is rewound to the returned text."""
        self._exhausted = True
        if self._submitted:
            self.model.scheduler.cancel(self)
        else:
            with self.model.lock:
                self.finish()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the library may be gone
            self.close()

    # --- scheduler side (model lock held) ------------------------------------------------------------------
    def push(self, event: StreamEvent | LlmError) -> bool:
        """Queue an event for the reader; returns whether a reader was waiting for it."""
        with self._ready:
            self._events.append(event)
            self._ready.notify_all()
            return self._reader_blocked

    def await_reader(self, deadline: float) -> None:
        """Wait (until `deadline`, monotonic) for the reader to take its events and come back to next()."""
        with self._ready:
            self._ready.wait_for(
                lambda: (self._reader_blocked and not self._events) or self.ended, max(0.0, deadline - time.monotonic())
            )

    @property
    def waiting_unread(self) -> bool:
        """The reader lags too far behind: skip this generation in the next step."""
        return len(self._events) >= LOOKAHEAD

    def start(self) -> None:
        model, state = self.model, self.state
        self.sampler = build_sampler(model.lib, model.n_vocab, self.params)
        for tok in state.tokens[-max(1, self.params.repeat_penalty_last_n_token_count) :]:
            model.lib.llama_sampler_accept(self.sampler, tok)  # the penalty window includes the prompt
        model.unevaluate_last(state)

    def accept(self, token: int, logprob: float | None) -> bool:
        """Account for a sampled token; returns True when the generation is over."""
        model, state = self.model, self.state
        state.append([token], [""], [logprob])
        self.eog = model.is_eog(token)
        step = self.text.on_token(
            token, model.piece(token), end_of_generation=self.eog, context_full=len(state.tokens) >= model.n_ctx
        )
        if step.chunk is not None and self.push(step.chunk):
            self.model.scheduler.readers.append(self)
        if step.finish is not None:
            self.push(StreamDone(finish_reason=step.finish, usage=self.text.usage))
            return True
        return False

    def finish(self) -> None:
        """Stop for good: free the sampler, rewind the state to the returned text, hand the slot on."""
        if self.ended:
            return
        self.ended = True
        model, state = self.model, self.state
        if self.sampler is not None:
            model.lib.llama_sampler_free(self.sampler)
            self.sampler = None
        if self.rewind:
            self._rewind_to_returned_text()
        self.on_end(state)

    def _rewind_to_returned_text(self) -> None:
        """Drop the tokens whose text was not returned (an end-of-generation token, a token a stop sequence
        began inside, an incomplete last character), and feed the kept part of a cut token's text back as
        tokens, so that the state is exactly the text."""
        model, state = self.model, self.state
        finished = self.text.finish_reason is not None
        # Cancelled: the sequence gets what its reader received, not chunks still waiting unread.
        returned = None if finished else "".join(self._delivered)
        plan = plan_rewind(self.text, self.eog and finished, returned)
        kept = self.base + plan.keep
        model.slots.trim(state, kept)  # kept tokens keep their KV cache
        state.token_texts[self.base : kept] = plan.kept_texts
        if plan.remainder:
            tokens = model.tokenize(plan.remainder, add_special=False)
            state.append(tokens, model.texts_of(tokens, plan.remainder))


@dataclass
class Row:
    job: LlamaGeneration
    tokens: list[int]
    sample_at: int | None  # the batch row whose logits this job samples from, if any


class Scheduler:
    """The model's decode loop (a daemon thread, started on first use)."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._waiting: collections.deque[LlamaGeneration] = collections.deque()
        self._active: list[LlamaGeneration] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.steps = 0
        self.readers: list[LlamaGeneration] = []  # woken by this step's events, with a chunk to handle
        self.reader_turn_s = READER_TURN_S if model.cpu_bound else 0.0

    def submit(self, job: LlamaGeneration) -> None:
        job.submitted_at = time.monotonic()
        with self.model.lock:
            job.state.busy = True  # reserved: not swapped out or reused while it waits for its turn
            self._waiting.append(job)
        self._ensure_thread()
        self.wake()

    def cancel(self, job: LlamaGeneration) -> None:
        with self.model.lock:  # between steps: the job runs no further step
            if job in self._waiting:
                self._waiting.remove(job)
            if job in self._active:
                self._active.remove(job)
            running = not job.ended
            job.finish()
        if running:  # a reader blocked in next() on another thread (a cancelled request) must wake up
            job.push(EngineError("the generation was cancelled"))
        self.wake()

    def wake(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def stop(self) -> None:
        self._stop = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _ensure_thread(self) -> None:
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"llmhost-{self.model.name}", daemon=True)
                self._thread.start()

    def _runnable(self) -> bool:
        return bool(self._waiting) or any(not j.waiting_unread for j in self._active)

    def _run(self) -> None:
        while not self._stop:
            with self._wake:
                self._wake.wait_for(lambda: self._stop or self._runnable(), timeout=1.0)
            if self._stop:
                return
            self.readers.clear()
            with self.model.lock:
                try:
                    self._step()
                except Exception as error:  # never let the loop die: fail what was running, keep serving
                    log.exception("decode step failed")
                    for job in [*self._active]:
                        self._active.remove(job)
                        job.push(error if isinstance(error, LlmError) else EngineError(f"decode failed: {error}"))
                        job.finish()
            if self.reader_turn_s and self.readers:
                deadline = time.monotonic() + self.reader_turn_s
                for job in self.readers:
                    job.await_reader(deadline)

    def _admit(self) -> None:
        """First come, first served: attach waiting jobs while slots are free (or can be freed)."""
        now = time.monotonic()
        while self._waiting:
            job = self._waiting[0]
            if not self.model.slots.attach(job.state, wait=False, reuse_prefix=job.reuse_prefix):
                if now - job.submitted_at > policy.SLOT_WAIT_TIMEOUT_S:
                    self._waiting.popleft()
                    job.push(slots_busy_error(self.model.name, self.model.config.slots))
                    job.finish()
                    continue
                return
            self._waiting.popleft()
            job.start()
            if len(job.state.tokens) >= self.model.n_ctx:  # a full window: nothing can be generated
                job.push(StreamDone(finish_reason=FinishReason.LENGTH, usage=job.text.usage))
                job.finish()
                continue
            self._active.append(job)

    def _plan(self) -> list[Row]:
        """Decode rows first (one token each), then prefill chunks in arrival order, within the batch size."""
        budget = self.model.n_batch
        rows: list[Row] = []
        ready = [j for j in self._active if not j.waiting_unread]
        generating = [j for j in ready if len(j.state.tokens) - j.state.n_kv == 1]
        prefilling = [j for j in ready if len(j.state.tokens) - j.state.n_kv > 1]
        for job in [*generating, *prefilling]:
            if budget <= 0:
                break
            state = job.state
            pending = state.tokens[state.n_kv :]
            chunk = pending[:budget]
            budget -= len(chunk)
            rows.append(Row(job, chunk, None if len(chunk) < len(pending) else -1))
        return rows

    def _step(self) -> None:
        self._admit()
        rows = self._plan()
        if not rows:
            return
        rows = self.model.decode_rows(rows)
        self.steps += 1
        for row in rows:
            job = row.job
            if row.sample_at is None:
                continue
            token = self.model.sample(job.sampler, row.sample_at)
            logprob = self.model.logprob(token, row.sample_at) if job.logprobs else None
            if job.accept(token, logprob):
                self._active.remove(job)
                job.finish()
