"""The guest SDK (`llmhost_guest`) end to end: tests/guests/sdk_probe runs SDK calls in a guest against the real
model. Slicing keeps text and model state exact, `+=` of sequences concatenates ids and logprobs evaluating only
the new part, `score` equals the logprobs the same tokens get when generated, `select` takes the argmax, and beam
search of width 1 is greedy generation."""

from __future__ import annotations

import json

import pytest

from .conftest import MODEL, Probe
from .greedy import NOISE

pytestmark = [pytest.mark.model, pytest.mark.wasm]


def test_slicing_at_every_character_keeps_text_and_state(sdk: Probe) -> None:
    value = sdk("slices", MODEL, "Hi, José! Où", "10")
    text = value["text"]
    assert len(value["slices"]) == len(text) + 1
    for part in value["slices"]:
        n = part["n"]
        assert part["text"] == text[:n] and part["len"] == n
        if part["ids"] and part["text"] == text:
            assert part["ids"] == value["ids"]
        if part["score"] is not None:
            # The slice's state equals its token ids: a continuation scores alike on it and on a fresh sequence fed
            # those ids (up to batch-shape noise, which moves a logprob far less than a wrong token would).
            assert abs(part["score"] - part["fresh"]) < NOISE / 2, part
    # Token prefixes inside the slice are kept: a slice's ids start with the ids of the longest fitting prefix.
    ids = value["ids"]
    assert any(p["ids"][:-1] == ids[: len(p["ids"]) - 1] and len(p["ids"]) > 2 for p in value["slices"])


def test_add_sequence_concatenates_ids_and_logprobs(sdk: Probe) -> None:
    value = sdk("concat", MODEL, "One, two,", "Red, green,")
    before, other, after = value["before"], value["other"], value["after"]
    bos = value["bos"]
    assert other["ids"][: len(bos)] == bos
    assert after["text"] == before["text"] + other["text"]
    assert after["ids"] == before["ids"] + other["ids"][len(bos) :]
    assert after["logprobs"] == before["logprobs"] + other["logprobs"][len(bos) :]
    assert after["ll"] == pytest.approx(sum(lp for lp in after["logprobs"] if lp is not None))
    # Only the new part was evaluated.
    assert after["evaluated"] - before["evaluated"] <= len(other["ids"]) - len(bos) + 1
    assert value["plus"] == {"text": after["text"] + " and more", "a_text": after["text"]}


def test_score_equals_logprobs_of_forced_generation_and_leaves_sequence(sdk: Probe) -> None:
    continuations = [" Paris", " London", " Paris, the city of light", " a big city with many people", ""]
    value = sdk("score", MODEL, "The capital of France is", json.dumps(continuations))
    assert value["after"] == "The capital of France is"
    for cont, score, forced in zip(continuations, value["scores"], value["forced"], strict=True):
        assert forced["text"] == "The capital of France is" + cont
        # Several continuations share a batch, whose shape moves logits a little on CPU (see the shared notes).
        tokens = sum(1 for lp in forced["logprobs"] if lp is not None)
        assert score == pytest.approx(forced["ll"], abs=0.15 * tokens), cont
    assert value["scores"][-1] == 0.0
    # Alone, a continuation is decoded as generation decodes it: the same numbers (f32 across the WIT).
    for cont, forced in zip(continuations[:3], value["forced"], strict=False):
        [alone] = sdk("score", MODEL, "The capital of France is", json.dumps([cont]))["scores"]
        assert alone == pytest.approx(forced["ll"], abs=1e-5 * len(cont)), cont


def test_select_picks_the_argmax(sdk: Probe) -> None:
    choices = [" positive", " negative", " neutral"]
    value = sdk("select", MODEL, "Review: I loved this film, it was wonderful.\nSentiment:", json.dumps(choices))
    best = max(range(len(choices)), key=lambda i: value["scores"][i])
    assert value["chosen"] == choices[best]
    assert value["text"].endswith(choices[best])


@pytest.mark.parametrize("stop", [[], ["."]])
def test_beam_search_of_width_one_is_greedy(sdk: Probe, stop: list[str]) -> None:
    value = sdk("beam", MODEL, "The capital of France is", "1", "16", json.dumps(stop))
    greedy, [beam] = value["greedy"], value["beams"]
    assert beam["text"] == greedy["text"] and beam["ids"] == greedy["ids"]
    assert beam["ll"] == pytest.approx(greedy["ll"])
    if greedy["finish"] == "length":
        assert beam["score"] == pytest.approx(greedy["ll"])
    assert value["source"] == "The capital of France is" and len(value["source_ids"]) == 6


def test_beam_search_returns_best_first_and_leaves_the_sequence(sdk: Probe) -> None:
    value = sdk("beam", MODEL, "The capital of France is", "4", "12", json.dumps(["."]))
    scores = [b["score"] for b in value["beams"]]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    assert len({b["text"] for b in value["beams"]}) == 4
    assert all(b["text"].startswith("The capital of France is") and "." not in b["text"] for b in value["beams"])
    assert value["source"] == "The capital of France is" and len(value["source_ids"]) == 6


def test_errors_are_typed_exceptions_with_the_hosts_message(sdk: Probe) -> None:
    value = sdk("errors", MODEL)
    assert value["unknown-model"]["type"] == "ModelNotSupported" and value["unknown-model"]["unsupported"]
    assert value["seq-unknown-model"]["type"] == "ModelNotSupported"
    assert value["bad-temperature"]["type"] == "InvalidInput" and "temperature" in value["bad-temperature"]["message"]
    assert value["beam-width"]["type"] == "InvalidInput" and "width" in value["beam-width"]["message"]
    assert value["two-constraints"]["type"] == "InvalidInput"


def test_chat_with_tools_through_the_sdk(sdk: Probe) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "days", "unit"],
    }
    value = sdk("chat", MODEL, "required", "3")
    for reply in value["replies"]:  # `required`: always a call whose arguments validate
        assert reply["finish_reason"] == "tool-calls", reply
        [call] = reply["calls"]
        assert call["name"] == "get_weather" and call["id"]
        jsonschema.validate(call["args"], schema)
        assert reply["usage"][0] > 0 and reply["usage"][1] > 0
    plain = value["plain"]
    assert plain["calls"] == [] and plain["text"] == (plain["content"] or "")
    assert plain["finish_reason"] in ("stop", "length") and plain["text"]
    value = sdk("chat", MODEL, "none", "1")  # `none`: the tools are not offered, the reply is text
    [reply] = value["replies"]
    assert reply["calls"] == [] and reply["finish_reason"] in ("stop", "length")
