"""The scheduler gives a stream's reader its turn between decode steps when decoding uses every core."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.engine.scheduler import READER_TURN_S

MODEL = "gemma-3-270m"
GREEDY = InferencingParams(max_tokens=24, temperature=0.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0)


def _host(cache_dir: Path, threads: int) -> Host:
    return Host(HostConfig(models={MODEL: ModelConfig(threads=threads, prefix_cache=False)}, cache_dir=cache_dir))


@pytest.fixture(scope="module")
def every_core_host(llmhost_cache_dir: Path) -> Iterator[Host]:
    with _host(llmhost_cache_dir, len(os.sched_getaffinity(0))) as host:
        yield host


def _decoding_while_reader_holds_chunk(host: Host, hold_s: float) -> list[bool]:
    """Read a stream, holding each chunk for `hold_s` before asking for the next; whether the engine was inside
    llama_decode at the end of each hold."""
    engine_model = host.engine.model(MODEL)  # type: ignore[attr-defined]
    seen = []
    for event in host.infer_stream(MODEL, "Once upon a time, there was a dragon who", GREEDY):
        if isinstance(event, StreamChunk):
            time.sleep(hold_s)
            seen.append(engine_model.decoding)
    return seen


def test_the_next_decode_waits_for_a_reader_handling_its_chunk(every_core_host: Host) -> None:
    # A short hold, well inside the turn even when this VM is slow to wake threads
    seen = _decoding_while_reader_holds_chunk(every_core_host, READER_TURN_S / 10)
    assert len(seen) >= 20
    # Decoding takes most of each step, so without the reader's turn it would nearly always be under way here.
    assert sum(seen) <= len(seen) // 3, seen


def test_a_slow_reader_gets_no_more_than_its_turn(every_core_host: Host) -> None:
    # A reader that keeps its chunk far longer than its turn does not stall the engine: decoding goes on meanwhile.
    scheduler = every_core_host.engine.model(MODEL).scheduler  # type: ignore[attr-defined]
    stream = every_core_host.infer_stream(MODEL, "Once upon a time, there was a dragon who", GREEDY)
    assert isinstance(next(stream), StreamChunk)
    steps = scheduler.steps
    time.sleep(0.2)  # the turn (3 ms) plus several decode steps (~30 ms each here)
    assert scheduler.steps > steps
    stream.close()


def test_with_spare_cores_the_engine_does_not_wait(llmhost_cache_dir: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a spare core: this machine has one")
    with _host(llmhost_cache_dir, 1) as host:
        seen = _decoding_while_reader_holds_chunk(host, READER_TURN_S / 3)
    assert sum(seen) >= len(seen) // 2, seen
