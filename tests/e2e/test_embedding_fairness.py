"""Fair sharing of the real Gemma model between embeddings and a generation, through the Python API: with 4
clients looping embeddings of 2 long texts each (one decode call, a batch, per text), a streamed completion's
first token comes before any embeddings batch that was not already under way when it was submitted, however many
embeddings calls are queued; and both go on to the end. Counted in batches (`EngineModel.embedding_batches`), not
seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.types import StreamChunk, StreamDone
from llmhost.engine.admission import Ticket

from .conftest import MODEL

pytestmark = [pytest.mark.model]

CLIENTS = 4
# ~270 tokens: over half a batch, so two texts never share one (each text is a decode call of its own), and half
# the time of a whole batch's text (issue 59)
LONG_TEXT = " ".join(f"Line {i}: the river rose again after the storm." for i in range(21))


@pytest.fixture(scope="module")
def host(llmhost_cache_dir: Path) -> Iterator[Host]:
    with Host(HostConfig(models={MODEL: ModelConfig(prefix_cache=False)}, cache_dir=llmhost_cache_dir)) as host:
        yield host


def wait_until(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_streams_first_token_waits_for_no_queued_embeddings_call(host: Host) -> None:
    tokens = len(host.tokenize(MODEL, LONG_TEXT))
    model = host.engine.model(MODEL)  # type: ignore[attr-defined]
    assert model.n_batch // 2 < tokens <= model.n_batch, tokens  # one text is one batch
    stop = threading.Event()
    answered: list[int] = []

    def client() -> None:
        while not stop.is_set():
            answered.append(len(host.embeddings(MODEL, [LONG_TEXT] * 2).embeddings))

    # The batches run when the generation is submitted (read under the model lock, where no batch runs).
    at_submit: list[int] = []
    submit = model.admission.submit

    def counted(ticket: Ticket) -> None:
        at_submit.append(model.embedding_batches)
        submit(ticket)

    clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in clients:
        thread.start()
    try:
        # One call runs, 3 wait for the embedding context (read without the model lock: taking it would submit the
        # stream between two batches, not during one).
        wait_until(lambda: model.admission.waiting == CLIENTS - 1)
        time.sleep(0.2)  # into the batch under way
        model.admission.submit = counted
        params = InferencingParams(max_tokens=4, temperature=0.0, repeat_penalty=1.0)  # 32 added nothing (issue 59)
        stream = host.infer_stream(MODEL, "Once upon a time", params)
        first = next(stream)
        at_first = model.embedding_batches
        rest = list(stream)
    finally:
        model.admission.submit = submit
        stop.set()
        for thread in clients:
            thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in clients)
    assert isinstance(first, StreamChunk) and isinstance(rest[-1], StreamDone), rest[-1:]
    # Only the batch under way when it was submitted ran before its first token: none of the 3 calls queued.
    assert len(at_submit) == 1 and at_first == at_submit[0], (at_submit, at_first)
    assert answered and all(n == 2 for n in answered)  # and every embeddings call was answered in full
