"""Multi-step bursts (planning.plan_burst, scheduler.Scheduler._burst): when a burst may start and go on, and that
a generation decoded in bursts gives what it gives step by step: the same tokens and text, stops cut exactly, every
token in exactly one chunk, an unread stream still held at LOOKAHEAD."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.domain.types import InferencingParams, StreamChunk, StreamDone
from llmhost.engine.local.fake_decoder import EOG
from llmhost.engine.local.planning import BURST_S, BURST_STEPS, Pending, burst_continues, plan_burst
from llmhost.engine.local.scheduler import LOOKAHEAD

from .test_engine_fake import GREEDY, MODEL, engine, greedy_reference

jobs_strategy = st.lists(
    st.builds(
        Pending,
        key=st.integers(0, 1000),
        pending=st.integers(0, 3),
        stalled=st.booleans(),
        fresh=st.booleans(),
        reads_logits=st.booleans(),
    ),
    max_size=10,
)


@given(jobs_strategy, st.integers(1, 8), st.booleans())
def test_a_burst_starts_only_when_every_job_that_can_take_a_row_decodes_one_token(
    jobs: list[Pending], budget: int, waiting: bool
) -> None:
    taking = [job for job in jobs if not job.stalled and job.pending > 0]
    allowed = (
        not waiting
        and bool(taking)
        and len(taking) <= budget
        and all(job.pending == 1 and not job.fresh and not job.reads_logits for job in taking)
    )
    assert plan_burst(jobs, budget, waiting) == ([job.key for job in taking] if allowed else None)


def test_a_burst_goes_on_within_its_steps_and_time_while_nothing_waits() -> None:
    assert burst_continues(1, 0.0, False)
    assert burst_continues(BURST_STEPS - 1, BURST_S / 2, False)
    assert not burst_continues(BURST_STEPS, 0.0, False)
    assert not burst_continues(1, BURST_S, False)
    assert not burst_continues(1, 0.0, True)  # a thread waits for the model lock
    # A lone generation read whole by the thread running the burst (`infer`): only new work ends it.
    assert burst_continues(BURST_STEPS * 4, BURST_S * 4, False, read_whole=True)
    assert not burst_continues(1, 0.0, True, read_whole=True)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stream_decoded_in_bursts_has_every_token_once_in_fewer_chunks(overlap: bool) -> None:
    eng, decoder = engine(n_ctx=96, overlap=overlap)
    # Steps of 3 ms, not microseconds: the reader, woken by the first token, takes it before the next step ends even
    # on a loaded machine (with instant steps, a descheduled reader found several tokens merged into its first chunk).
    decoder.step_s = 0.003
    params = GREEDY.model_copy(update={"max_tokens": 40})
    events = list(eng.stream(MODEL, "Hello", params))
    expected = greedy_reference(decoder, decoder.tokenize("Hello", True), 40)
    chunks = [e for e in events if isinstance(e, StreamChunk)]
    done = events[-1]
    assert isinstance(done, StreamDone)
    generated = [t for t in expected if t != EOG]
    assert [t for c in chunks for t in c.token_ids] == generated[: len([t for c in chunks for t in c.token_ids])]
    assert done.usage.generated_token_count == len(expected)
    # The first token comes alone (the time to the first chunk never waits for a burst); then bursts.
    assert len(chunks[0].token_ids) == 1
    assert len(chunks) < len(generated) and max(len(c.token_ids) for c in chunks) <= BURST_STEPS
    scheduler = eng.model(MODEL).scheduler  # type: ignore[attr-defined]
    assert scheduler.rows == scheduler.steps  # one row per step: one stream
    eng.close()


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stop_found_inside_a_burst_cuts_the_text_and_the_sequence_exactly(overlap: bool) -> None:
    eng, decoder = engine(n_ctx=96, overlap=overlap)
    reference = eng.infer(MODEL, "Hello", GREEDY.model_copy(update={"max_tokens": 30})).text
    stop = reference[14:17]
    assert stop and reference.find(stop) >= 3
    params = GREEDY.model_copy(update={"max_tokens": 30, "stop": (stop,)})
    seq = eng.open_sequence(MODEL)
    seq.append("Hello")
    result = seq.generate(params)
    assert result.text == reference[: reference.find(stop)]
    assert seq.text() == "Hello" + result.text  # the rows decoded past the stop were rewound
    seq.close()
    assert decoder.violations == []
    eng.close()


@pytest.mark.parametrize("overlap", [False, True])
def test_bursts_of_several_streams_match_each_stream_alone(overlap: bool) -> None:
    eng, decoder = engine(slots=4, n_ctx=96, overlap=overlap)
    params = GREEDY.model_copy(update={"max_tokens": 24})
    prompts = [f"prompt {i}" for i in range(4)]
    alone = [eng.infer(MODEL, p, params).text for p in prompts]
    results: dict[int, str] = {}

    def read(i: int) -> None:
        results[i] = "".join(e.text for e in eng.stream(MODEL, prompts[i], params) if isinstance(e, StreamChunk))

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(4)] == alone
    assert decoder.violations == [] and eng.model(MODEL).slots.available == 4  # type: ignore[attr-defined]
    eng.close()


def test_an_unread_stream_still_stops_at_lookahead() -> None:
    eng, _ = engine(n_ctx=96)
    stream = eng.stream(MODEL, "Hello", InferencingParams(max_tokens=60, temperature=0.0, repeat_penalty=1.0))
    assert isinstance(next(stream), StreamChunk)
    time.sleep(0.3)  # the background thread reads ahead (in bursts once the stream is past its first tokens)
    assert stream.buffered == LOOKAHEAD  # type: ignore[attr-defined]
    stream.close()
    eng.close()


def test_a_generation_read_whole_runs_in_one_burst_to_its_end() -> None:
    eng, decoder = engine(n_ctx=160)
    scheduler = eng.model(MODEL).scheduler  # type: ignore[attr-defined]
    params = GREEDY.model_copy(update={"max_tokens": 100})
    before = scheduler.attempts
    result = eng.infer(MODEL, "Hello", params)
    expected = greedy_reference(decoder, decoder.tokenize("Hello", True), 100)
    assert result.usage.generated_token_count == len(expected)
    # The prompt's step, then one burst past BURST_STEPS to the end (a stream's reader would come back every burst).
    assert len(expected) > 2 * BURST_STEPS and scheduler.attempts - before <= 3
    streamed_before = scheduler.attempts
    list(eng.stream(MODEL, "Hello", params))
    assert scheduler.attempts - streamed_before >= len(expected) // BURST_STEPS
    eng.close()


def test_work_waiting_for_a_slot_does_not_end_bursts() -> None:
    """More streams than slots (a loaded server): the one waiting for a slot cannot be admitted until a stream
    ends, so it must not end every burst after one step (nothing would free a slot sooner)."""
    eng, decoder = engine(slots=2, n_ctx=96)
    model = eng.model(MODEL)  # type: ignore[attr-defined]
    scheduler = model.scheduler
    params = GREEDY.model_copy(update={"max_tokens": 60})
    first, second = eng.stream(MODEL, "Hello", params), eng.stream(MODEL, "Hi there", params)
    heads = [next(first), next(second)]
    assert all(isinstance(head, StreamChunk) for head in heads)
    third_text: list[str] = []
    reader = threading.Thread(target=lambda: third_text.extend(e.text for e in third if isinstance(e, StreamChunk)))
    third = eng.stream(MODEL, "Good morning", params)
    reader.start()
    deadline = time.monotonic() + 5
    while model.admission.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert model.admission.waiting == 1  # every slot is busy: the third stream waits for one
    steps, attempts = scheduler.steps, scheduler.attempts
    first_text = heads[0].text + "".join(e.text for e in first if isinstance(e, StreamChunk))  # type: ignore[union-attr]
    assert scheduler.steps - steps >= 2 * BURST_STEPS  # the first stream ran on (the queued one still waits)...
    assert scheduler.attempts - attempts <= (scheduler.steps - steps) // 4  # ...in bursts, not step by step
    rest = [heads[1].text + "".join(e.text for e in second if isinstance(e, StreamChunk))]  # type: ignore[union-attr]
    reader.join(timeout=10)
    rest.append("".join(third_text))
    alone = [eng.infer(MODEL, p, params).text for p in ("Hello", "Hi there", "Good morning")]
    assert [first_text, *rest] == alone
    assert decoder.violations == []
    eng.close()
