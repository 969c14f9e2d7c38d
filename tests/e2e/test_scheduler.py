"""The scheduler: a reader waiting for its next token runs the decode step itself (no thread hand-off), a reader
gets its turn between steps when decoding uses every core, and a generation waiting for a slot does not spin."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.engine.local.planning import BURST_STEPS
from llmhost.engine.local.scheduler import LOOKAHEAD, READER_TURN_S, STALL_RETRY_S
from probe_driver import run_probe

MODEL = "gemma-3-270m"
GREEDY = InferencingParams(max_tokens=24, temperature=0.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0)


def _host(cache_dir: Path, threads: int, slots: int = 4) -> Host:
    config = ModelConfig(threads=threads, prefix_cache=False, slots=slots)
    return Host(HostConfig(models={MODEL: config}, cache_dir=cache_dir))


@pytest.fixture(scope="module")
def every_core_host(llmhost_cache_dir: Path) -> Iterator[Host]:
    with _host(llmhost_cache_dir, len(os.sched_getaffinity(0))) as host:
        yield host


def _decoding_while_reader_holds_chunk(host: Host, hold_s: float) -> list[bool]:
    """Read a stream, holding each chunk for `hold_s` before asking for the next; whether the engine was inside
    llama_decode at the end of each hold. (A chunk holds one token, or a burst's: 240 tokens give a dozen or more.)"""
    engine_model = host.engine.model(MODEL)  # type: ignore[attr-defined]
    seen = []
    params = GREEDY.model_copy(update={"max_tokens": 240})
    for event in host.infer_stream(MODEL, "Once upon a time, there was a dragon who", params):
        if isinstance(event, StreamChunk):
            time.sleep(hold_s)
            seen.append(engine_model.decoding)
    return seen


def test_the_next_decode_waits_for_a_reader_handling_its_chunk(every_core_host: Host) -> None:
    # A short hold, well inside the turn even when this VM is slow to wake threads
    seen = _decoding_while_reader_holds_chunk(every_core_host, READER_TURN_S / 10)
    assert len(seen) >= 12
    # Decoding takes most of each step, so without the reader's turn it would nearly always be under way here.
    assert sum(seen) <= len(seen) // 3, seen


def test_a_slow_reader_gets_no_more_than_its_turn(every_core_host: Host) -> None:
    # A reader that keeps its chunk far longer than its turn does not stall the engine: decoding goes on meanwhile.
    scheduler = every_core_host.engine.model(MODEL).scheduler  # type: ignore[attr-defined]
    stream = every_core_host.infer_stream(MODEL, "Once upon a time, there was a dragon who", GREEDY)
    assert isinstance(next(stream), StreamChunk)
    steps = scheduler.steps
    # The turn (3 ms) plus a decode step (~30 ms here); waited for longer, as this VM sometimes stalls for a while.
    deadline = time.monotonic() + 5
    while scheduler.steps == steps and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scheduler.steps > steps
    stream.close()


def test_with_spare_cores_the_engine_does_not_wait(llmhost_cache_dir: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a spare core: this machine has one")
    with _host(llmhost_cache_dir, 1) as host:
        seen = _decoding_while_reader_holds_chunk(host, READER_TURN_S / 3)
    assert sum(seen) >= len(seen) // 2, seen


def test_a_guest_reading_its_stream_runs_the_decode_steps_on_its_own_thread(
    every_core_host: Host, probe_wasm: Path
) -> None:
    # No thread hand-off per token: the guest's next() finds no event and decodes the next token itself.
    app = every_core_host.load(probe_wasm)
    model = every_core_host.engine.model(MODEL)  # type: ignore[attr-defined]
    threads: list[int] = model.decode_threads
    threads.clear()
    model.record_decode_threads = True  # the model records the thread of every decode from now on
    # Enough tokens for several bursts: a burst is up to BURST_STEPS decodes on one thread, so one the background
    # thread takes while the guest is slow to come back (below) moves that many at once, not one.
    params = json.dumps({"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 6 * BURST_STEPS})
    try:
        outcome = run_probe(app, "stream", MODEL, "Once upon a time, there was a dragon who", params)
    finally:
        model.record_decode_threads = False
    assert outcome.exit_code == 0, outcome.stderr
    events = outcome.value["events"]
    generated = events[-1]["done"]["usage"]["generated-token-count"]
    assert generated >= 3 * BURST_STEPS
    assert len(threads) >= generated  # the prompt, then every generated token but the last
    # The background thread may take a step when the guest is slow to come back (this VM stalls at times).
    assert threads.count(threading.get_ident()) >= len(threads) * 0.8, threads


def test_a_generation_waiting_for_a_slot_does_not_spin(llmhost_cache_dir: Path) -> None:
    with _host(llmhost_cache_dir, len(os.sched_getaffinity(0)), slots=1) as host:
        scheduler = host.engine.model(MODEL).scheduler  # type: ignore[attr-defined]
        holder = host.infer_stream(MODEL, "Once upon a time", GREEDY)
        assert isinstance(next(holder), StreamChunk)  # holds the only slot; unread, it stops after LOOKAHEAD
        deadline = time.monotonic() + 30
        while holder.buffered < LOOKAHEAD and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.01)
        assert holder.buffered == LOOKAHEAD  # type: ignore[attr-defined]
        attempts_before = scheduler.attempts
        waiter = host.infer_stream(MODEL, "A second request", GREEDY)
        result: list[Any] = []
        reader = threading.Thread(target=lambda: result.append(next(waiter)))
        reader.start()
        try:
            time.sleep(0.5)
            tries = scheduler.attempts - attempts_before
        finally:
            holder.close()  # frees the slot: the waiting request starts at once
            reader.join(timeout=10)
            waiter.close()
        # Retried every STALL_RETRY_S (50 ms), not in a loop: spinning would make thousands of calls
        assert 1 <= tries <= 0.5 / STALL_RETRY_S + 5, tries
        assert result and isinstance(result[0], StreamChunk)


class _RecordingLib:
    """The llama.cpp binding, recording the thread of every llama_decode."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.threads: list[int] = []

    def llama_decode(self, *args: Any) -> Any:
        self.threads.append(threading.get_ident())
        return self._lib.llama_decode(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)


def test_every_llama_decode_runs_on_one_thread_whichever_thread_asks(every_core_host: Host) -> None:
    # llama.cpp's OpenMP gives each calling thread a team of its own, and more teams than cores slow every decode
    # (engine/local/compute.py): streams read on several threads, an append and embeddings all decode on one.
    decoder = every_core_host.engine.model(MODEL).decoder  # type: ignore[attr-defined]
    recording = _RecordingLib(decoder.lib)
    decoder.lib = recording
    try:
        callers: list[int] = []

        def read(i: int) -> None:
            callers.append(threading.get_ident())
            every_core_host.infer(MODEL, f"Once upon a time {i}", GREEDY)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seq = every_core_host.open_sequence(MODEL)
        seq.append("A sequence appended on the test's thread.")
        seq.close()
        every_core_host.embeddings(MODEL, ["and embeddings"])
    finally:
        decoder.lib = recording._lib
    assert len(recording.threads) >= GREEDY.max_tokens  # the three streams share steps
    assert len(set(recording.threads)) == 1, set(recording.threads)
    assert recording.threads[0] not in [*callers, threading.get_ident()]
