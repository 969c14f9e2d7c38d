"""`infer-stream` end to end: probe guest → host → llama.cpp, compared with `infer` on the same requests."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

from llmhost import Host
from llmhost.engine.local.scheduler import LOOKAHEAD
from probe_driver import ProbeOutcome

from .conftest import MODEL
from .test_llm_guest import STORY, infer, token_texts

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]


def stream(probe: Probe, prompt: str, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    outcome = probe("stream", MODEL, prompt, json.dumps(params))
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr)
    *chunks, done = outcome.value["events"]
    assert outcome.value["after-done"] == [None, None]
    return [c["chunk"] for c in chunks], done["done"]


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 24},
        {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 40, "stop": [" very", "brave"]},
        {"temperature": 0.9, "seed": 11, "max-tokens": 20},
        {"temperature": 0.0, "max-tokens": None, "repeat-penalty": 1.3},
    ],
)
def test_stream_equals_infer(real_probe: Probe, params: dict[str, Any]) -> None:
    prompt = "}\n}\n}\n" if params["max-tokens"] is None else STORY
    chunks, done = stream(real_probe, prompt, **params)
    result = infer(real_probe, prompt, **params)
    assert "".join(c["text"] for c in chunks) == result["text"]
    assert done == {"finish-reason": result["finish-reason"], "usage": result["usage"]}


def test_nothing_of_a_stop_sequence_is_ever_emitted(real_probe: Probe, real_host: Host) -> None:
    text = b"".join(p for _, p in token_texts(real_host, STORY, 40)).decode()
    stop = text[20:26]  # occurs in the text: generation stops there
    chunks, done = stream(
        real_probe, STORY, **{"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 40, "stop": [stop]}
    )
    emitted = "".join(c["text"] for c in chunks)
    assert emitted == text[: text.find(stop)] and done["finish-reason"] == "stop"
    # Text that could begin the stop sequence is held back, never sent and then taken back.
    assert all(stop not in c["text"] for c in chunks)
    assert not any(emitted.endswith(stop[:k]) for k in range(1, len(stop)))


def test_chunks_carry_every_token_once_and_split_characters_arrive_whole(real_probe: Probe, real_host: Host) -> None:
    # A chunk holds all the text that was ready when the guest asked (one token's or a burst's: scheduler.py).
    chunks, done = stream(real_probe, STORY, **{"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 16})
    reference = token_texts(real_host, STORY, 16)
    assert [t for c in chunks for t in c["token-ids"]] == [t for t, _ in reference]
    assert done["usage"]["generated-token-count"] == 16 and all(c["token-ids"] for c in chunks)
    counts = [c["usage"]["generated-token-count"] for c in chunks]
    assert counts == list(itertools.accumulate(len(c["token-ids"]) for c in chunks))

    moose = "🫎🫎🫎 🫎🫎 🫎🫎🫎 🫎"
    reference = token_texts(real_host, moose, 10)
    pieces = dict(reference)
    chunks, _ = stream(real_probe, moose, **{"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 10})
    assert [t for c in chunks for t in c["token-ids"]] == [t for t, _ in reference][
        : sum(len(c["token-ids"]) for c in chunks)
    ]
    # A four-byte character split over four tokens is never split over chunks: each chunk's tokens spell its text.
    assert any("🫎" in c["text"] for c in chunks)
    assert all(b"".join(pieces[t] for t in c["token-ids"]) == c["text"].encode() for c in chunks[:-1])
    assert all("\ufffd" not in c["text"] for c in chunks)


def test_dropping_a_stream_cancels_generation_and_frees_its_slot(real_probe: Probe, real_host: Host) -> None:
    model = real_host.engine.model(MODEL)  # type: ignore[attr-defined]
    slots = model.config.slots
    prompt = "A list of rivers: the Nile, the Amazon,"  # not used elsewhere: no cached prefix to reuse
    prompt_tokens = len(real_host.tokenize(MODEL, prompt))
    before = model.evaluated_tokens
    outcome = real_probe("stream-drop", MODEL, prompt, "3", "0")
    assert outcome.exit_code == 0, outcome
    read = outcome.value["read"]
    assert len(read) == 3
    tokens = sum(len(event["chunk"]["token-ids"]) for event in read)
    # Three chunks' tokens cost the prompt plus all but the last of them decoded; the scheduler may have run up to
    # LOOKAHEAD steps ahead of the reader. After the drop (and half a second of sleep in the guest) nothing more was
    # decoded: an uncancelled generation would have gone on towards its 64-token budget.
    assert prompt_tokens + tokens - 1 <= model.evaluated_tokens - before <= prompt_tokens + tokens - 1 + LOOKAHEAD
    assert model.slots.available == slots
    # After a drop, all the slots can be held at once by new streams.
    outcome = real_probe("stream-drop", MODEL, prompt, "3", str(slots))
    assert outcome.exit_code == 0, outcome
    assert len(outcome.value["held"]) == slots and all("chunk" in e for e in outcome.value["held"])
    assert model.slots.available == slots
