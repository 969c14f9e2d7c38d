"""Continuous batching: every active generation of a model is decoded together, one step at a time.

Each step builds one batch: the next token of every generating slot, then prompt chunks of generations still
in prefill, up to the batch size (so a long prompt never stalls the others); decodes once; samples each slot
from its own row; hands each generation its events. A step runs on the thread that needs it: a reader waiting
in next() with nothing to read runs the step itself, so a lone stream costs no wait for another scheduler thread
per token (only the llama_decode call itself goes to the process's compute thread, compute.py; where the decode
leaves a core free, the whole decode goes there and the step reports the last step's tokens meanwhile: `overlap`);
a background thread runs the steps nobody waits for (reading ahead for a reader busy with its last chunk). A
generation whose reader lags `LOOKAHEAD` events behind is skipped, so an unread stream costs little, and a
cancelled one stops before the next step. When decoding uses every core, the readers a step woke get their turn
before the next decode (`READER_TURN_S`). New generations wait in the model's admission queue (admission.py)
with every other kind of work that needs a slot, first come, first served, as slots free up; embeddings calls
wait there for the embedding context, apart, and take the model lock in turn with the steps
(model_lock.EmbeddingTurns).
"""

from __future__ import annotations

import logging
import threading
import time

from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import FinishReason, StreamChunk, StreamDone, StreamEvent
from llmhost.engine.admission import Ticket
from llmhost.engine.generation import merge_chunks
from llmhost.engine.local.constraint_mask import MaskWorker
from llmhost.engine.local.job import LOOKAHEAD, LlamaGeneration, LlamaModel, Row
from llmhost.engine.local.planning import Pending, burst_continues, decode_calls, plan_burst, plan_step

log = logging.getLogger(__name__)

# When decoding uses every core, a reader handling its chunk during the next decode takes a core from one of
# llama.cpp's threads, and the others wait for it at each barrier of the graph: that slows the decode by several
# times the reader's own time. So after a step the readers it woke get their turn first (they take their chunk and
# come back to next()) for at most this long, and the background thread waits as long before reading ahead.
READER_TURN_S = 0.003

# A guest's sampling loop (next-token reads) comes back with its next read after running its processors in the
# sandbox and appending the token it chose: the next step waits up to this long for the loops the last step
# answered, so that their reads decode together instead of each in a step of its own (on any device: batching
# them is the point). It only waits while some loop has not come back; a lone loop never waits.
FOLLOW_UP_TURN_S = 0.015

# A step that could do nothing (every slot busy, nothing to decode) is retried after this long, or as soon as
# something changes (a slot frees, a generation arrives or is cancelled), so waiting never spins.
STALL_RETRY_S = 0.05


class Scheduler:
    """The model's decode steps, run by waiting readers or by a background thread (started on first use).

    One mutex guards the hand-over: every generation's events, which readers wait in next(), and whether a step
    is under way. Lock order: the model lock, then the mutex (never the reverse)."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._waiting: set[LlamaGeneration] = set()  # submitted, not admitted yet (in the admission queue)
        self._active: list[LlamaGeneration] = []
        self._mutex = threading.Lock()
        self._turn_cv = self.condition()  # a step waiting for the readers' turn
        self._background_cv = self.condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._stepping = False  # a thread is running a step (at most one at a time)
        self._blocked: list[LlamaGeneration] = []  # whose readers wait in next() (each may run the next step)
        self._last_step_end = 0.0
        self._stalled_until = 0.0
        self.steps = 0
        self.rows = 0  # sequences decoded over all steps (rows / steps: the mean batch size)
        self.attempts = 0  # steps tried, including those that could do nothing (tests: waiting never spins)
        self.readers: list[LlamaGeneration] = []  # woken by the last step's events, with a chunk to handle
        self._to_report: list[LlamaGeneration] = []  # jobs that took a token the last step and have not reported it
        self.reader_turn_s = READER_TURN_S if model.cpu_bound else 0.0
        # Report the last step's tokens while the next decode runs, where the decode leaves a core free (a GPU, or
        # spare cores): where it needs every core, Python running beside it stalls its threads at every barrier
        # (measured: Gemma's one-token decode 14.5 → 16 ms, to hide 0.07 ms of reporting).
        self.overlap = not model.cpu_bound
        self.masks = MaskWorker()
        self._bursting = False  # steps follow each other at once (planning.plan_burst); readers wait for the end
        self._stepping_for: LlamaGeneration | None = None  # whose reader runs the step under way (None: background)
        self._burst_report: dict[LlamaGeneration, None] = {}  # jobs whose tokens the burst reports at its end
        self._notify_later: dict[LlamaGeneration, None] = {}  # polling readers a burst tells of events at its end

    def submit(self, job: LlamaGeneration) -> None:
        model = self.model
        job.ticket = Ticket(
            "generation",
            take=lambda: model.slots.attach(job.state, reuse_prefix=job.reuse_prefix),
            on_admit=lambda: self._admitted(job),
            on_fail=lambda error: self._refused(job, error),
        )
        job.submitted_at = time.monotonic()
        with model.lock:
            job.state.busy = True  # reserved: not swapped out or reused while it waits for its turn
            job.state.submissions += 1
            job.submission = job.state.submissions
            self._waiting.add(job)
            model.admission.submit(job.ticket)
        self._ensure_thread()
        self.wake()

    def cancel(self, job: LlamaGeneration) -> None:
        with self.model.lock:  # between steps: the job runs no further step
            if job in self._waiting:
                self._waiting.discard(job)
                assert job.ticket is not None
                self.model.admission.cancel(job.ticket)
                job.ticket = None
            if job in self._active:
                self._active.remove(job)
            running = not job.ended
            job.finish()
        if running:  # a reader blocked in next() on another thread (a cancelled request) must wake up
            job.push(EngineError("the generation was cancelled"))
        self.wake()

    def condition(self) -> threading.Condition:
        return threading.Condition(self._mutex)

    def wake(self) -> None:
        """Something changed that may let a step run (a generation arrived, a slot freed, a reader caught up)."""
        with self._mutex:
            self._stalled_until = 0.0
            self._wake_stepper()

    def stop(self) -> None:
        with self._mutex:
            self._stop = True
            for job in self._blocked:  # every reader still waiting learns that the model is closed
                job._ready.notify()
            for job in [*self._active, *self._waiting]:  # and so does every polling one
                if job.notify is not None:
                    job.notify()
            self._background_cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _ensure_thread(self) -> None:
        with self._mutex:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"llmhost-{self.model.name}", daemon=True)
                self._thread.start()

    # --- hand-over (mutex held unless said otherwise) ------------------------------------------------------
    def deliver(self, job: LlamaGeneration, event: StreamEvent | LlmError) -> bool:
        """Queue `event` for `job`'s reader; returns whether the reader was waiting in next() for it."""
        with self._mutex:
            job._events.append(event)
            job.pushed += 1
            # A burst wakes its readers once, at its end (but a first event). A generation that ends inside a burst
            # is reported and finished at once, and its reader woken then (`_finish`).
            if not self._bursting or job.pushed == 1:
                job._ready.notify()
                if job.notify is not None:
                    job.notify()
            elif job.notify is not None:
                self._notify_later[job] = None
            return job.reader_waits

    def next_event(self, job: LlamaGeneration) -> StreamEvent | LlmError:
        """`job`'s next event, for its reader. While there is none, this thread runs the steps (when no other
        thread is running one): the reader then gets its event with no thread hand-off."""
        with self._mutex:
            if job._left_at:
                job._back_within_turn = time.monotonic() - job._left_at < self.reader_turn_s
            while not job._events:
                if self._stop:
                    return EngineError(f"model {self.model.name!r} was closed")
                if self._may_step():
                    self._step_here(job)
                    continue
                self._blocked.append(job)
                job.reader_waits = True
                self._turn_cv.notify()  # a step may be waiting for this reader's turn
                job._ready.wait(self._stall_wait())
                self._blocked.remove(job)
                job.reader_waits = False
            return self._take(job)

    def poll_event(self, job: LlamaGeneration) -> StreamEvent | LlmError | None:
        """`job`'s next event if there is one, for a reader that polls (asyncio); it never steps (the background
        thread does) nor waits. None: there is none yet, and the reader counts as waiting in next() until its
        `notify` is called and it polls again."""
        with self._mutex:
            if job._events:
                job.reader_waits = False
                return self._take(job)
            if self._stop:
                return EngineError(f"model {self.model.name!r} was closed")
            job.reader_waits = True
            self._turn_cv.notify()  # a step may be waiting for this reader's turn
            self._wake_stepper()
            return None

    def _take(self, job: LlamaGeneration) -> StreamEvent | LlmError:
        """Pop `job`'s next event (mutex held, one there)."""
        caught_up = len(job._events) >= LOOKAHEAD  # it was skipped by the steps: now it can run again
        event = job._events.popleft()
        if isinstance(event, StreamChunk) and job._events and isinstance(job._events[0], StreamChunk):
            # All the text that is ready, as one chunk: a reader handles a burst's tokens in one go.
            chunks = [event]
            while job._events and isinstance(job._events[0], StreamChunk):
                chunks.append(job._events.popleft())  # type: ignore[arg-type]
            event = merge_chunks(chunks)
        if caught_up:
            self._wake_stepper()
        job._left_at = time.monotonic()
        return event

    def _idle_reader(self) -> LlamaGeneration | None:
        """A generation whose reader waits in next() with nothing to read: it runs the next step itself."""
        return next((job for job in self._blocked if not job._events), None)

    def _wake_stepper(self, stepped_for: LlamaGeneration | None = None) -> None:
        """Wake a thread to run the next step: a reader waiting with nothing to read, else the background one,
        unless the reader who just ran a step for its own generation is expected back within its turn (waking
        a thread costs that reader time: the woken one takes the GIL while the reader hands its chunk over)."""
        idle = self._idle_reader()
        if idle is not None:
            idle._ready.notify()
        elif stepped_for is None or stepped_for.ended or not stepped_for._back_within_turn:
            self._background_cv.notify()

    def wants_step(self) -> bool:
        """Whether generations wait for a decode step (other work under the model lock yields to them)."""
        return self._runnable()

    def generating(self) -> bool:
        """Whether generations share the model (waiting or active, even between two of their steps): other work
        under the model lock takes small turns while they do."""
        return bool(self._waiting or self._active)

    def _runnable(self) -> bool:
        return bool(self._waiting or self._to_report) or any(not j.waiting_unread for j in self._active)

    def _may_step(self) -> bool:
        return not self._stepping and self._runnable() and time.monotonic() >= self._stalled_until

    def _stall_wait(self) -> float | None:
        """How long a thread that may not step waits before looking again (None: until notified)."""
        if self._stepping or not self._runnable():
            return None
        return max(0.0, self._stalled_until - time.monotonic())

    def _step_here(self, stepped_for: LlamaGeneration | None = None) -> None:
        """Run one step on this thread, for `stepped_for`'s reader or the background thread (mutex held on entry
        and exit, released during the step)."""
        self._stepping = True
        self._mutex.release()
        # Set and cleared outside the mutex: the caller holds `stepped_for`, so clearing never frees a job here (a
        # job's `__del__` cancels it, which takes the mutex).
        self._stepping_for = stepped_for
        try:
            progressed = self._turn_then_step()
        finally:
            self._stepping_for = None
            self._mutex.acquire()
            self._stepping = False
            self._last_step_end = time.monotonic()
            if not progressed:
                self._stalled_until = self._last_step_end + STALL_RETRY_S
            self._wake_stepper(stepped_for)

    def _run(self) -> None:
        """The background thread: runs the steps no reader waits for, after the woken readers' turn."""
        with self._mutex:
            while not self._stop:
                if self._stepping or self._idle_reader() is not None or not self._runnable():
                    self._background_cv.wait()
                    continue
                # Polling readers (asyncio) that are all back already need no turn.
                back = bool(self.readers) and all(self._reader_back(job) for job in self.readers)
                ready_at = max(self._last_step_end + (0.0 if back else self.reader_turn_s), self._stalled_until)
                delay = ready_at - time.monotonic()
                if delay > 0:
                    self._background_cv.wait(delay)
                    continue
                self._step_here()

    # --- steps (no mutex held) -----------------------------------------------------------------------------
    def _turn_then_step(self) -> bool:
        """Give the readers the last step woke their turn, then run a step; returns whether it did anything."""
        turn = self.reader_turn_s
        if any(job.follow_up for job in self.readers):
            turn = max(turn, FOLLOW_UP_TURN_S)
        if turn and self.readers:
            deadline = self._last_step_end + turn
            with self._mutex:
                self._turn_cv.wait_for(
                    lambda: all(self._reader_back(j) for j in self.readers), max(0.0, deadline - time.monotonic())
                )
        self.readers = []
        with self.model.lock:
            try:
                return self._step()
            except Exception as error:  # never let a step take the engine down: fail what was running
                log.exception("decode step failed")
                for job in [*self._active]:
                    self._active.remove(job)
                    job.push(error if isinstance(error, LlmError) else EngineError(f"decode failed: {error}"))
                    job.finish()
                return True

    def _reader_back(self, job: LlamaGeneration) -> bool:
        """`job`'s reader has taken its event and is back (mutex held): waiting in next() for the next one, or,
        for a job whose reader follows up with a new job on the same sequence, with that job submitted. A
        finished job without follow-up has nothing to come back for."""
        if job.follow_up:
            return job.state.submissions > job.submission
        return job.ended or (job.reader_waits and not job._events)

    def _admitted(self, job: LlamaGeneration) -> None:
        """`job` got its slot, in the admission queue's order (model lock held; on whichever thread admitted it)."""
        self._waiting.discard(job)
        # The ticket's callbacks refer to the job: dropping it leaves no reference cycle, so the job is freed (and
        # its `__del__` cancels it) when its reader lets go, never by the cyclic collector inside a locked region.
        job.ticket = None
        job.start()
        if job.window_full():
            job.push(StreamDone(finish_reason=FinishReason.LENGTH, usage=job.text.usage))
            job.finish()
        else:
            self._active.append(job)
        self.wake()

    def _refused(self, job: LlamaGeneration, error: LlmError) -> None:
        """`job` waited past the admission timeout (model lock held)."""
        self._waiting.discard(job)
        job.ticket = None
        job.push(error)
        job.finish()

    def _pending(self) -> tuple[dict[int, LlamaGeneration], list[Pending]]:
        """The jobs that may take a row (not those whose last token is taken), by key, and what planning needs of
        them."""
        jobs = {id(job): job for job in self._active if not job.last}
        pending = [
            Pending(
                key,
                len(j.state.tokens) - j.state.n_kv,
                j.waiting_unread,
                j.state.n_kv,
                j is self._stepping_for and j.streamed and len(j.state.tokens) - j.base <= 1,
                not j.defers,
            )
            for key, j in jobs.items()
        ]
        return jobs, pending

    def _plan(self, jobs: dict[int, LlamaGeneration], pending: list[Pending]) -> list[Row]:
        """This step's rows (planning.plan_step: decode rows first, then prefill chunks in arrival order)."""
        rows: list[Row] = []
        for planned in plan_step(pending, self.model.n_batch, self.model.chunk):
            state = jobs[planned.key].state
            chunk = state.tokens[state.n_kv : state.n_kv + planned.count]
            rows.append(Row(jobs[planned.key], chunk, -1 if planned.samples else None))
        return rows

    def _yield_now(self) -> bool:
        """Between two steps of a burst: admit what the admission queue can take now (a generation joins the
        next step; other work then waits for the model lock), and say whether the burst must end: a thread waits
        for the model lock. Work that cannot be admitted (no free slot) does not end it: nothing would free one."""
        admission = self.model.admission
        if admission.waiting:
            admission.admit()
        return self.model.lock.contended

    def _step(self) -> bool:
        """Admit, then decode and sample: one step, or several in a row (a burst) for as long as planning allows
        (model lock held). Returns whether anything was admitted or decoded.

        In a burst the readers are told of their events when it ends, all at once, except of a generation's first
        event (the time to the first chunk waits for no burst); a burst ends when the reader running it has a first
        token to take. Steps where every generation decodes one token run in `_burst`'s lean loop (not in
        deterministic mode, whose calls `decode_calls` shapes); others are planned (`_plan`) each time."""
        self.attempts += 1
        admitted = self.model.admission.admit()
        started = time.monotonic()
        steps = 0
        self._bursting = True
        try:
            while True:
                jobs, pending = self._pending()
                # (What the admission queue could take was admitted: at the start, or by `_yield_now`.)
                contended = self.model.lock.contended
                keys = plan_burst(pending, self.model.n_batch, contended) if self.model.chunk is None else None
                if keys is not None:
                    steps = self._burst(jobs, keys, started, steps)
                else:
                    rows = self._plan(jobs, pending)
                    if not rows:  # no decode to report under: the tokens taken last step are reported now
                        return self._report(self._taken()) or admitted or steps > 0
                    self._planned_step(rows)
                    steps += 1
                    own = self._stepping_for
                    if own is not None and own.streamed and len(own.state.tokens) - own.base <= 1:
                        return True  # its reader takes its first tokens at once
                own = self._stepping_for
                read_whole = own is not None and not own.streamed and len(self._active) == 1 and own in self._active
                if not burst_continues(steps, time.monotonic() - started, self._yield_now(), read_whole):
                    return True
        finally:
            self._end_burst()

    def _planned_step(self, rows: list[Row]) -> None:
        """Decode and sample the planned rows: in one call, or in deterministic mode in several
        (planning.decode_calls), each sampled before the next call replaces the logits."""
        if self.model.chunk is None:
            decoded = self._decode_and_sample(rows)
        else:
            group = self.model.decoder.invariant_rows
            decoded = 0
            for call in decode_calls([(row.slot, len(row.tokens)) for row in rows], group):
                decoded += self._decode_and_sample([rows[i] for i in call])
                self._report(self._taken())
        self.steps += 1
        self.rows += decoded

    def _burst(self, jobs: dict[int, LlamaGeneration], keys: list[int], started: float, steps: int) -> int:
        """Steps of one-token rows, one after the other, while no job joins (admitted work is planned again) or leaves
        (by taking its last token, lagging too far or ending): after its first step only that is checked, and what
        holds for the whole batch once (constraints, plain greedy rows) still holds. Returns the burst's steps so
        far (`steps` before). This loop runs once per token of every stream: it is kept lean (measured by
        bench/host_time.py)."""
        batch = [jobs[key] for key in keys]
        lean = all(job.constraint is None for job in batch)
        greedy = lean and all(job.plain_greedy for job in batch)
        admission, lock = self.model.admission, self.model.lock
        while True:
            if not lean or not self._lean_step(batch, greedy):
                self.rows += self._decode_and_sample([Row(job, job.state.tokens[-1:], -1) for job in batch])
            self.steps += 1
            steps += 1
            if admission.waiting and admission.admit():
                return steps  # planned again (`_step`): work joined (a generation's prompt goes in the next step)
            waiting = lock.contended
            own = len(batch) == 1 and batch[0] is self._stepping_for  # a lone reader's own stream: it may lag
            read_whole = own and not batch[0].streamed and len(self._active) == 1  # nobody else's reader waits
            if not burst_continues(steps, time.monotonic() - started, waiting, read_whole):
                return steps
            if own:
                if batch[0].ended or batch[0].last:
                    return steps
                continue
            kept = [job for job in batch if not job.ended and not job.last and self._may_lag(job)]
            if len(kept) < len(batch):
                return steps  # planned again (`_step`): the batch changed
            batch = kept

    def _end_burst(self) -> None:
        """Report what the burst deferred, and wake its readers (mutex), all at once."""
        deferred, self._burst_report = list(self._burst_report), {}
        self._report(deferred)  # one go over each job's tokens: cheaper than one report after every decode
        self.readers = list(dict.fromkeys(self.readers))  # each reader once, however many events it got
        with self._mutex:
            self._bursting = False
            for job in self._blocked:
                if job._events:
                    job._ready.notify()
            later, self._notify_later = list(self._notify_later), {}
            for job in later:
                if job.notify is not None:
                    job.notify()

    def _may_lag(self, job: LlamaGeneration) -> bool:
        """Whether `job` takes a further step of a burst. A reader waiting for its events (it runs the burst, or
        waits in next(): it takes them all when the burst ends) holds its stream in it; a stream whose reader is
        elsewhere stops at `LOOKAHEAD` events ahead, as without bursts."""
        return job is self._stepping_for or not job.waiting_unread

    def _lean_step(self, batch: list[LlamaGeneration], greedy: bool) -> bool:
        """A burst's step where no row is constrained: decode every job's last token (reporting the last step's
        tokens meanwhile with `overlap`), take each one's next token (`greedy`: every row plain greedy, all from one
        argmax over the logits block). Without `overlap`, its tokens' text is reported at the burst's end, or at
        once for jobs with stop strings. False when the KV cache had no room: nothing was decoded (the caller takes
        the general path, which shrinks the batch)."""
        model = self.model
        states = [job.state for job in batch]
        if self.overlap:
            wait = model.start_next(states, True)
            ended = [job for job in self._taken() if not job.ended and job.report()]
            decoded = wait()
            for job in ended:  # a stop found in its report: its row was decoded for nothing (`finish` rewinds it)
                self._finish(job)
            if ended:
                greedy = False  # rows of ended jobs are skipped
        else:
            decoded = model.start_next(states)()
        if not decoded:
            return False
        if greedy:
            for job, token in zip(batch, model.decoder.argmax_rows(range(len(batch))), strict=True):
                job.take(token, None)
        else:
            for row, job in enumerate(batch):
                if not job.ended:
                    job.take(*model.sample_row(job, row, None))
        for job in batch:
            if job.ended:
                continue
            if self.overlap and job.text.token_ids:
                self._to_report.append(job)
            elif not job.params.stop and job.text.token_ids and not job.last:
                self._burst_report[job] = None
            elif job.report():  # a last token at once: its slot goes to queued work before the next decode
                self._finish(job)
        self.rows += len(batch)
        return True

    def _finish(self, job: LlamaGeneration) -> None:
        """End `job` (model lock held): its slot goes to queued work in the next step. Inside a burst its reader is
        told now, not at the burst's end, so that its client's next request comes sooner; only after `finish`, so
        that the reader finds the sequence rewound and the slot handed on."""
        self._active.remove(job)
        job.finish()
        if self._bursting:
            with self._mutex:
                job._ready.notify()
                if job in self._notify_later:  # a polling reader, told once
                    del self._notify_later[job]
                    if job.notify is not None:
                        job.notify()

    def _taken(self) -> list[LlamaGeneration]:
        taken, self._to_report = self._to_report, []
        return taken

    def _report(self, jobs: list[LlamaGeneration]) -> bool:
        """Text, stops and events of the tokens `jobs` took; the jobs that ended are finished (their sequences
        touched: never while a decode runs). Returns whether there were any."""
        for job in jobs:
            if not job.ended and job.report():
                self._finish(job)
        return bool(jobs)

    def _decode_and_sample(self, rows: list[Row]) -> int:
        """Decode the rows; while the decode runs, report the tokens the last step took (host work that would
        otherwise sit between two decodes: at GPU speed a step is 1-3 ms); then take each sampling row's next
        token. A stop sequence found in that report ends its job after its row was decoded: the row is wasted,
        and the rewind (`finish`) drops it from the sequence. A job's first token is reported at once (the time to
        the first chunk never waits for another decode), and so is every token without `overlap`."""
        # Token masks of constrained rows are computed while the batch decodes (both release the GIL).
        masks = self.masks.start([row.job.constraint for row in rows if row.sample_at is not None])
        taken = self._taken()
        ended: list[LlamaGeneration] = []
        try:
            wait = self.model.start_rows(rows, self.overlap)
            try:
                ended = [job for job in taken if not job.ended and job.report()]
            finally:
                rows = wait()
        finally:
            ready = masks.wait()
        for job in ended:
            self._finish(job)
        tokens = {}
        if len(rows) > 1:  # the greedy rows' tokens in one pass over the logits block
            greedy = [row for row in rows if row.sample_at is not None and not row.job.ended and row.job.plain_greedy]
            if len(greedy) > 1:
                found = self.model.decoder.argmax_rows([row.sample_at for row in greedy if row.sample_at is not None])
                tokens = {id(row): token for row, token in zip(greedy, found, strict=True)}
        for row in rows:
            job = row.job
            if row.sample_at is None or job.ended:
                continue
            if not job.defers:
                if job.on_logits(row.sample_at, ready.get(id(job.constraint))):
                    self._finish(job)
                continue
            token = tokens.get(id(row))
            if token is None:
                job.take(*self.model.sample_row(job, row.sample_at, ready.get(id(job.constraint))))
            else:
                job.take(token, None)
            if self.overlap and job.text.token_ids:
                self._to_report.append(job)
            elif self._bursting and not job.params.stop and job.text.token_ids and not job.last:  # as in `_lean_step`
                self._burst_report[job] = None
            else:
                self._report([job])
        return len(rows)
