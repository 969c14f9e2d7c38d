"""One generation as the scheduler runs it (`LlamaGeneration`), the model parts it uses (`LlamaModel`), and a
planned batch row (`Row`). The reader side (iteration, close) hands over to the model's scheduler (scheduler.py);
the scheduler side (take, report, finish) runs under the model lock.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from llmhost import telemetry
from llmhost.config import ModelConfig
from llmhost.domain.errors import LlmError
from llmhost.domain.types import (
    InferencingParams,
    StreamDone,
    StreamEvent,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from llmhost.engine.admission import AdmissionQueue, Ticket
from llmhost.engine.generation import GenerationText
from llmhost.engine.local.constraint_mask import TokenConstraint
from llmhost.engine.local.decoder import Decoder
from llmhost.engine.local.sampling import penalty_window
from llmhost.engine.local.sequence_state import SeqState, plan_rewind
from llmhost.engine.local.slots import SlotPool
from llmhost.engine.observer import ModelObserver

# Events a generation may run ahead of its reader. More than one: readers are threads that need a moment (and
# the GIL) to take their event after each step; with one, most would miss the next step and batches would
# shrink. Few: a stream nobody reads stops soon, and cancelling wastes at most this many decode steps.
LOOKAHEAD = 4


class SchedulerSide(Protocol):
    """What a generation uses of its model's scheduler (scheduler.Scheduler has it)."""

    readers: list[LlamaGeneration]  # woken by the last step's events, with a chunk to handle

    def condition(self) -> threading.Condition: ...

    def submit(self, job: LlamaGeneration) -> None: ...

    def next_event(self, job: LlamaGeneration) -> StreamEvent | LlmError: ...

    def poll_event(self, job: LlamaGeneration) -> StreamEvent | LlmError | None: ...

    def cancel(self, job: LlamaGeneration) -> None: ...

    def deliver(self, job: LlamaGeneration, event: StreamEvent | LlmError) -> bool: ...


class LlamaModel(Protocol):
    """What the scheduler and its generations use of a model (`model.EngineModel` has it): the scheduler works on
    these parts and never imports the model that wires them."""

    name: str
    config: ModelConfig
    decoder: Decoder
    lock: Any  # the model's ModelLock (reentrant; knows when others wait): every decoder call runs under it
    slots: SlotPool
    admission: AdmissionQueue

    n_ctx: int
    n_batch: int
    chunk: int | None  # deterministic mode's row alignment (planning.py), or None
    cpu_bound: bool
    observer: ModelObserver

    @property
    def scheduler(self) -> SchedulerSide: ...

    def piece(self, token: int) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...

    def tokenize(self, text: str, add_special: bool = True) -> list[int]: ...

    def texts_of(self, tokens: list[int], text: str) -> list[str]: ...

    def unevaluate_last(self, state: SeqState) -> None: ...

    def start_rows(self, rows: list[Row], overlap: bool = False) -> Callable[[], list[Row]]: ...

    def start_next(self, states: list[SeqState], overlap: bool = False) -> Callable[[], bool]: ...

    def top_logprobs(self, logits: Any, k: int) -> tuple[float, tuple[TopLogprob, ...]]: ...

    def sample_row(
        self, job: LlamaGeneration, row: int, mask: Any
    ) -> tuple[int, float | None, TokenLogprob | None]: ...


class LlamaGeneration:
    """One generation on a `SeqState`, driven by the model's scheduler; iterate it to read its events.

    `on_end(state)` runs once when it ends or is cancelled (after the rewind, for sequences), under the model
    lock: `retire` for a one-off request, `release` for a guest's sequence.
    """

    reports_usage = True  # its usage is counted by the model's observer when it ends (a next-token read's is not)

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
        constraint: TokenConstraint | None = None,
    ) -> None:
        self.model = model
        self.state = state
        self.params = params
        self.on_end = on_end
        self.rewind = rewind
        # Raw log-probabilities are computed for sequences (they keep them) and when the params ask for them.
        self.logprobs = logprobs or params.logprobs is not None
        self.constraint = constraint
        self.reuse_prefix = reuse_prefix
        self.base = len(state.tokens)
        self.text = GenerationText(params.stop, self.base, params.max_tokens)
        self.sampler: Any = None
        self._plain_greedy = False  # its sampler takes the argmax and nothing else (set by `start`)
        self._is_eog = model.is_eog
        self.reader_waits = False  # its reader waits in next() (the scheduler's mutex guards it)
        self.pushed = 0  # events pushed so far
        # Its reader reads it as a stream (a reader that collects the whole result clears it): the first tokens
        # then end the burst that took them, so the first chunks come at once.
        self.streamed = True
        self.eog = False  # the last reported token ended the generation
        # Tokens in the sequence whose text is not accounted for yet (`take`, then `report`): (token, its logprob
        # entry, end-of-generation, context full after it, the constraint's language ended with it).
        self._unreported: list[tuple[int, TokenLogprob | None, bool, bool, bool]] = []
        self.last = False  # its last token is taken: no further row for it
        # Reports its tokens while the next decode runs (see Scheduler._step); a job that reads the logits rows
        # itself (next_token.NextTokenRead) does all its work in `on_logits`.
        self.defers = True
        self.ticket: Ticket | None = None  # its place in the model's admission queue, until admitted
        self.ended = False  # the scheduler no longer runs it (finished, failed or cancelled)
        # Guarded by the scheduler's mutex (which also knows whether the reader waits in next() for an event).
        self._events: collections.deque[StreamEvent | LlmError] = collections.deque()
        self._ready = model.scheduler.condition()
        self._left_at = 0.0  # when the reader last left next() with an event
        self._back_within_turn = False  # the reader came back to next() within its turn last time
        self._submitted = False
        self._exhausted = False
        self._delivered: list[str] = []  # chunk texts the reader took
        # Its reader comes back with another job on the same sequence once it has its result (a guest's
        # next-token read): the readers' turn after a step waits for that job rather than for this one's next().
        self.follow_up = False
        self.submission = 0  # the state's submission count when this job was submitted
        self.submitted_at = 0.0  # when it was submitted (time.monotonic): the time to its first token counts from it
        self._first_token = True  # the next token taken is its first (reported to the model's observer)
        # Traced: the caller's span, and when the generation was admitted and took its first token (for its spans).
        self.trace, self.admitted_at, self.first_token_at = telemetry.capture(), 0.0, 0.0
        # A reader that polls (asyncio) instead of waiting in next(): called on any thread when an event may be ready.
        self.notify: Callable[[], None] | None = None

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
        self._submit_once()
        return self._deliver(self.model.scheduler.next_event(self))

    def watch(self, notify: Callable[[], None]) -> None:
        """Read by polling (`poll`) instead of next(): `notify` is called, on any thread, when an event may be ready.
        Submits the generation (this takes the model lock: call it off the event loop)."""
        self.notify = notify
        self._submit_once()

    def poll(self) -> StreamEvent | None:
        """The next event if one is ready (None: wait for `notify`); never steps nor waits. Raises like next()."""
        if self._exhausted:
            raise StopIteration
        event = self.model.scheduler.poll_event(self)
        return None if event is None else self._deliver(event)

    def _submit_once(self) -> None:
        if not self._submitted:
            self._submitted = True
            self.model.scheduler.submit(self)

    def _deliver(self, event: StreamEvent | LlmError) -> StreamEvent:
        """An event taken from the scheduler, as next() and poll() hand it on (an error is raised)."""
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
        return self.model.scheduler.deliver(self, event)

    @property
    def buffered(self) -> int:
        """Events generated ahead of the reader, not read yet."""
        return len(self._events)

    @property
    def waiting_unread(self) -> bool:
        """The reader lags too far behind: skip this generation in the next step. Not while it waits in next():
        woken, it takes every event there is (a burst's readers come back with up to `BURST_STEPS` waiting). Tokens a
        burst reports at its end count as events."""
        return len(self._events) + len(self._unreported) >= LOOKAHEAD and not self.reader_waits

    def start(self) -> None:
        model, state = self.model, self.state
        self.admitted_at = time.monotonic()
        self.sampler = model.decoder.new_sampler(self.params)
        self._plain_greedy = not self.logprobs and bool(getattr(self.sampler, "plain_greedy", False))
        state.greedy = self.plain_greedy
        for tok in state.tokens[-max(1, penalty_window(self.params, model.n_ctx)) :]:
            self.sampler.accept(tok)  # the penalty window includes the prompt
        model.unevaluate_last(state)

    def window_full(self) -> bool:
        """Nothing can be generated: the context window is full."""
        return len(self.state.tokens) >= self.model.n_ctx

    @property
    def plain_greedy(self) -> bool:
        """Its next token is the raw row's argmax, with nothing else to read from the row (no log-probabilities,
        no constraint): the scheduler may take it from one argmax over the step's rows."""
        return self._plain_greedy and self.constraint is None

    def on_logits(self, row: int, mask: Any) -> bool:
        """This step decoded the job's last pending token into output `row`: sample and account for the next
        token. Returns True when the job is over."""
        token, logprob, entry = self.model.sample_row(self, row, mask)
        return self.accept(token, logprob, entry)

    def accept(self, token: int, logprob: float | None, entry: TokenLogprob | None = None) -> bool:
        """Account for a sampled token; returns True when the generation is over."""
        self.take(token, logprob, entry)
        return self.report()

    def take(self, token: int, logprob: float | None, entry: TokenLogprob | None = None) -> bool:
        """The part of accepting a sampled token that the next decode needs: the sequence gets it, the constraint
        its step. Returns True when no token can follow it (end-of-generation, the token budget, a full window, a
        language that ended): the job then gets no further row. `report` does the rest."""
        model, state = self.model, self.state
        if self._first_token:
            self._first_token = False
            self.first_token_at = time.monotonic()
            model.observer.first_token(self.first_token_at - self.submitted_at)
        state.tokens.append(token)  # SeqState.append, for one token
        state.token_texts.append("")
        state.logprobs.append(logprob)
        eog = self._is_eog(token)
        full = len(state.tokens) >= model.n_ctx
        # The language admits no further token: end now rather than wait for end-of-generation.
        ended = not eog and self.constraint is not None and self.constraint.advance(token)
        self._unreported.append((token, entry, eog, full, ended))
        budget = self.params.max_tokens
        self.last = (
            eog or full or ended or (budget is not None and len(self.text.token_ids) + len(self._unreported) >= budget)
        )
        return self.last

    def report(self) -> bool:
        """Text, stops and events for the tokens taken since the last report, as one chunk; returns True when the
        generation is over (a stop sequence may end it before its last taken token: the rest are dropped, and the
        rewind drops them from the sequence)."""
        model, text = self.model, self.text
        unreported, self._unreported = self._unreported, []
        released: list[str] = []
        finish = None
        for token, entry, eog, full, ended in unreported:
            self.eog = eog
            piece, finish = text.take_token(
                token, model.piece(token), end_of_generation=eog, context_full=full, logprob=entry
            )
            released.append(piece)
            if finish is None and ended:
                piece, finish = text.end_of_language_text()
                released.append(piece)
            if finish is not None:
                break
        chunk = text.release(released[0] if len(released) == 1 else "".join(released))
        if chunk is not None and self.push(chunk):
            model.scheduler.readers.append(self)
        if finish is not None:
            self.push(StreamDone(finish_reason=finish, usage=text.usage))
            return True
        return False

    def finish(self) -> None:
        """Stop for good: free the sampler, rewind the state to the returned text, hand the slot on."""
        if self.ended:
            return
        self.ended = True
        state = self.state
        state.greedy = False
        if self.reports_usage and self.sampler is not None:  # it was admitted (one refused never ran)
            usage = self.text.usage
            self.model.observer.generation_done(usage.prompt_token_count, usage.generated_token_count)
        if self.trace is not None:  # traced: its queue wait, prefill and decode
            times = (self.submitted_at, self.admitted_at, self.first_token_at, time.monotonic())
            reason = self.text.finish_reason
            telemetry.model_work(
                self.trace, self.model.name, times, self.text.usage, reason and reason.openai, self.reused_prompt_tokens
            )
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        self.constraint = None
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

    @property
    def slot(self) -> int:
        slot = self.job.state.slot
        assert slot is not None, "a planned row's sequence is attached"
        return slot
