"""The engine (scheduler, slot pool, swapping, prefix reuse, exact rewind) on the deterministic fake decoder:
no model, so random interleavings of operations can be checked by the thousand.

The fake decoder's logits after a position are a pure function of the tokens its slot holds before it, so the
invariant "a sequence's model state is exactly its token ids" is checked directly: the cells a slot holds (or the
bytes saved for a swapped-out sequence) equal the sequence's tokens, and its next logits equal the logits after
its token ids.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import InferencingParams, StreamChunk
from llmhost.engine.local import compute
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import EOG, FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.planning import Pending, Planned, plan_step
from llmhost.engine.local.sequence import LlamaSequence

MODEL = "fake"
GREEDY = InferencingParams(max_tokens=6, temperature=0.0, repeat_penalty=1.0)


def engine(
    slots: int = 2, n_ctx: int = 48, n_batch: int = 8, prefix_cache: bool = True, overlap: bool = False
) -> tuple[LlamaCppEngine, FakeDecoder]:
    """`overlap`: the scheduler reports a step's tokens during the next decode (as where the decode leaves a core
    free, a GPU); else each token at once (as on a CPU whose cores the decode uses)."""
    decoder = FakeDecoder(n_ctx=n_ctx, n_batch=n_batch, n_slots=slots)
    config = ModelConfig(slots=slots, context_length=n_ctx, batch_size=n_batch, prefix_cache=prefix_cache)

    def load(name: str, config: ModelConfig) -> EngineModel:
        model = EngineModel(name, config, decoder)
        model.scheduler.overlap = overlap
        return model

    return LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=load), decoder


def greedy_reference(decoder: FakeDecoder, tokens: list[int], n: int) -> list[int]:
    history, out = list(tokens), []
    for _ in range(n):
        token = int(np.argmax(decoder.logits_after(history)))
        out.append(token)
        if token == EOG:
            break
        history.append(token)
    return out


# -- planning (pure) -------------------------------------------------------------------------------------------


def test_plan_puts_decode_rows_first_then_prefill_within_the_budget() -> None:
    jobs = [Pending(1, 30), Pending(2, 1), Pending(3, 1, stalled=True), Pending(4, 5)]
    assert plan_step(jobs, 8) == [Planned(2, 1, True), Planned(1, 7, False)]
    assert plan_step(jobs, 40) == [Planned(2, 1, True), Planned(1, 30, True), Planned(4, 5, True)]


@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=12), st.integers(1, 64))
def test_plan_never_exceeds_the_budget_and_skips_stalled_jobs(jobs: list[tuple[int, bool]], budget: int) -> None:
    pending = [Pending(i, n, stalled) for i, (n, stalled) in enumerate(jobs)]
    planned = plan_step(pending, budget)
    assert sum(p.count for p in planned) <= budget
    by_key = {p.key: p for p in pending}
    for p in planned:
        job = by_key[p.key]
        assert not job.stalled and 0 < p.count <= job.pending and p.samples == (p.count == job.pending)
    decoding = [p.key for p in pending if p.pending == 1 and not p.stalled]
    assert [p.key for p in planned[: len(decoding)]] == decoding[: len(planned)]


# -- generation through the scheduler ------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True])
def test_greedy_generation_equals_the_reference_and_frees_its_slot(overlap: bool) -> None:
    eng, decoder = engine(overlap=overlap)
    prompt = "Hello"
    result = eng.infer(MODEL, prompt, GREEDY.model_copy(update={"max_tokens": 10}))
    expected = greedy_reference(decoder, decoder.tokenize(prompt, True), 10)
    text = b"".join(decoder.piece(t) for t in expected if t != EOG).decode("utf-8", "ignore")
    assert result.text == text
    assert result.usage.generated_token_count == len(expected)
    assert eng.model(MODEL).slots.available == 2 and decoder.violations == []
    eng.close()


@pytest.mark.parametrize("overlap", [False, True])
def test_concurrent_streams_decode_together_and_match_running_alone(overlap: bool) -> None:
    eng, decoder = engine(slots=4, overlap=overlap)
    threads: list[int] = []
    decode = decoder.decode

    def recorded(*args: Any) -> int:
        threads.append(threading.get_ident())
        return decode(*args)

    decoder.decode = recorded  # type: ignore[method-assign]
    prompts = [f"prompt {i}" for i in range(6)]
    params = GREEDY.model_copy(update={"max_tokens": 8})
    alone = [eng.infer(MODEL, p, params).text for p in prompts]
    streams = [eng.stream(MODEL, p, params) for p in prompts]
    texts = ["".join(e.text for e in s if isinstance(e, StreamChunk)) for s in streams]
    assert texts == alone
    # With overlap every step's decode ran on the compute thread (the step reported meanwhile); without, on the
    # thread that ran the step.
    assert (set(threads) == {compute.run(threading.get_ident)}) == overlap, threads
    assert decoder.violations == [] and eng.model(MODEL).slots.available == 4
    eng.close()


def test_a_sequence_over_the_window_is_refused_and_nothing_is_added() -> None:
    eng, _ = engine(n_ctx=16)
    seq = eng.open_sequence(MODEL)
    seq.append("short")
    try:
        seq.append("x" * 40)
    except InvalidInput:
        pass
    else:
        raise AssertionError("an append over the window must be refused")
    assert seq.text() == "short"
    seq.close()
    eng.close()


# -- random interleavings --------------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open")),
        st.tuples(st.just("append"), st.integers(0, 5), st.text("abcxyz .", min_size=1, max_size=12)),
        st.tuples(st.just("generate"), st.integers(0, 5), st.integers(1, 6), st.sampled_from(["", "a", "x "])),
        st.tuples(st.just("stream"), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("fork"), st.integers(0, 5)),
        st.tuples(st.just("truncate"), st.integers(0, 5), st.integers(0, 30)),
        st.tuples(st.just("close"), st.integers(0, 5)),
        st.tuples(st.just("infer"), st.text("abc", min_size=1, max_size=6), st.integers(1, 5)),
        st.tuples(st.just("drop"), st.text("abc", min_size=1, max_size=6), st.integers(0, 2)),
    ),
    max_size=25,
)


def check_state(decoder: FakeDecoder, seq: LlamaSequence) -> None:
    state = seq._state
    assert state.n_kv <= len(state.tokens)
    if state.slot is not None:
        assert decoder.cells[state.slot] == state.tokens[: state.n_kv], "a slot's cells differ from its sequence"
    elif state.saved is not None:
        assert json.loads(state.saved)[0] == state.tokens[: state.n_kv], "saved state differs from the sequence"
    else:
        assert state.n_kv == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(1, 3), st.booleans(), st.booleans())
def test_random_interleavings_never_leak_and_state_is_always_the_token_ids(
    ops: list[tuple[object, ...]], slots: int, prefix_cache: bool, overlap: bool
) -> None:
    eng, decoder = engine(slots=slots, n_ctx=40, n_batch=8, prefix_cache=prefix_cache, overlap=overlap)
    model = eng.model(MODEL)
    seqs: list[LlamaSequence] = []
    texts: list[str] = []
    for op in [("open",), ("open",), *ops]:  # two sequences to start with, so most operations have a target
        name = op[0]
        target = seqs[op[1] % len(seqs)] if seqs and name not in ("open", "infer", "drop") else None  # type: ignore[operator]
        index = seqs.index(target) if target is not None else -1
        try:
            if name == "open":
                seqs.append(eng.open_sequence(MODEL))  # type: ignore[arg-type]
                texts.append("")
            elif target is None:
                if name == "infer":
                    eng.infer(MODEL, str(op[1]), GREEDY.model_copy(update={"max_tokens": op[2]}))
                elif name == "drop":
                    stream = eng.stream(MODEL, str(op[1]), GREEDY)
                    for _ in range(int(op[2])):  # type: ignore[call-overload]
                        next(stream, None)
                    stream.close()
            elif name == "append":
                target.append(str(op[2]))
                texts[index] += str(op[2])
            elif name == "generate":
                stop = (str(op[3]),) if op[3] else ()
                result = target.generate(GREEDY.model_copy(update={"max_tokens": op[2], "stop": stop}))
                texts[index] += result.text
            elif name == "stream":
                stream = target.generate_stream(GREEDY)
                for _ in range(int(op[2])):  # type: ignore[call-overload]
                    event = next(stream, None)
                    if isinstance(event, StreamChunk):
                        texts[index] += event.text
                stream.close()
            elif name == "fork":
                seqs.append(target.fork())  # type: ignore[arg-type]
                texts.append(texts[index])
            elif name == "truncate":
                count = min(int(op[2]), len(target))  # type: ignore[call-overload]
                target.truncate(count)
                texts[index] = target.text()  # cut at a token boundary
            elif name == "close":
                target.close()
                seqs.pop(index)
                texts.pop(index)
        except InvalidInput:
            pass  # an empty sequence generating, a window overflow: refused, and nothing changed
        assert decoder.violations == []
        for seq, text in zip(seqs, texts, strict=True):
            assert seq.text() == text
            check_state(decoder, seq)
    for seq in seqs:
        if len(seq):
            # The model state is exactly the token ids: the next logits are those after the ids.
            assert np.array_equal(
                np.asarray(seq.next_logits(), dtype=np.float32), decoder.logits_after(seq.token_ids())
            )
        seq.close()
    assert model.slots.available == slots and model.slots.swapped_bytes == 0
    assert not any(s.busy for s in model.slots._holders.values())
    eng.close()
