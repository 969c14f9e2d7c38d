"""Structured output and token logprobs (llmhost:llm@0.2.0), end to end: probe guest → host → llama.cpp, on both
built-in models (their tokenizers differ: 262k and 49k tokens).

Every constrained text is checked with an independent parser (json + jsonschema, `re.fullmatch`), never
against hard-coded output.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from probe_driver import ProbeOutcome

from .conftest import MODEL, MODELS, SMOL

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]

GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0}

SCHEMAS: dict[str, dict[str, Any]] = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3}
        },
        "required": ["tags"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "string", "enum": ["S", "M", "L"]},
        },
        "required": ["color", "size"],
        "additionalProperties": False,
    },
    "ranges": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "ok": {"type": "boolean"},
        },
        "required": ["age", "ok"],
        "additionalProperties": False,
    },
    "optional-pattern": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "note": {"type": "string", "maxLength": 12},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
}


def run_ok(probe: Probe, *args: str) -> Any:
    outcome = probe(*args)
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr[-2000:])
    return outcome.value


def infer(probe: Probe, prompt: str, model: str = MODEL, **params: Any) -> dict[str, Any]:
    value: dict[str, Any] = run_ok(probe, "infer", model, prompt, json.dumps(params))
    return value


def infer_error(probe: Probe, model: str = MODEL, **params: Any) -> dict[str, str]:
    outcome = probe("infer", model, "Hello", json.dumps(params))
    assert outcome.exit_code == 1 and outcome.error is not None, outcome
    return outcome.error


# 8 samples per schema on Gemma and 4 on SmolLM2 in `make test`; 20 on Gemma is a soak for `make test-slow` (issue 59).
@pytest.mark.slow
@pytest.mark.parametrize(("model", "samples"), [(MODEL, 8), (SMOL, 4), pytest.param(MODEL, 20, marks=pytest.mark.soak)])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_schema_samples_at_temperature_one_all_parse_and_validate(
    real_probe: Probe, name: str, model: str, samples: int
) -> None:
    schema = SCHEMAS[name]
    params = {"temperature": 1.0, "max-tokens": 200, "constraint": {"json-schema": json.dumps(schema)}}
    prompt = f"Write one JSON object matching this schema: {json.dumps(schema)}\n"
    results = run_ok(real_probe, "infer-seeds", model, prompt, json.dumps(params), str(samples))
    assert len(results) == samples
    for result in results:
        assert result["finish-reason"] == "stop", result
        jsonschema.validate(json.loads(result["text"]), schema)
    # Seeded: the same seeds give the same samples.
    assert run_ok(real_probe, "infer-seeds", model, prompt, json.dumps(params), "2") == results[:2]


@pytest.mark.parametrize("model", MODELS)
def test_json_object_constraint(real_probe: Probe, model: str) -> None:
    prompt = "A JSON object describing a cat:"
    result = infer(real_probe, prompt, model, **GREEDY, **{"max-tokens": 120}, constraint={"json-object": None})
    assert result["finish-reason"] in ("stop", "length")
    if result["finish-reason"] == "stop":
        assert isinstance(json.loads(result["text"]), dict)
    else:
        assert result["text"].lstrip().startswith("{")


@pytest.mark.parametrize("model", MODELS)
def test_regex_through_infer_and_stream_and_sequence(real_probe: Probe, model: str) -> None:
    pattern = r"[0-9]{3}-[0-9]{4}"
    params = {"temperature": 0.9, "seed": 7, "max-tokens": 30, "constraint": {"regex": pattern}}
    result = infer(real_probe, "My phone number is ", model, **params)
    assert result["finish-reason"] == "stop"
    assert re.fullmatch(pattern, result["text"]), result
    # Streaming chunks joined equal the non-streamed text for the same seed.
    events = run_ok(real_probe, "stream", model, "My phone number is ", json.dumps(params))["events"]
    chunks = [e["chunk"]["text"] for e in events if e and "chunk" in e]
    assert "".join(chunks) == result["text"]
    # In a sequence the constraint covers only the new text; the sequence then holds prompt + text exactly.
    script = [
        ["open", "a"],
        ["append", "a", "My phone number is "],
        ["generate", "a", params],
        ["text", "a"],
    ]
    steps = run_ok(real_probe, "seq", model, json.dumps(script))
    generated = steps[2]["ok"]["text"]
    assert re.fullmatch(pattern, generated)
    assert steps[3]["ok"] == "My phone number is " + generated


@pytest.mark.parametrize("model", MODELS)
def test_constraint_and_stop_sequences_compose(real_probe: Probe, model: str) -> None:
    # The regex allows "-" but the stop sequence cuts the text right before it.
    params = {**GREEDY, "max-tokens": 30, "stop": ["-"], "constraint": {"regex": r"[0-9]{3}-[0-9]{4}"}}
    result = infer(real_probe, "My phone number is ", model, **params)
    assert result["finish-reason"] == "stop"
    assert re.fullmatch(r"[0-9]{3}", result["text"]), result


@pytest.mark.parametrize("model", MODELS)
def test_gbnf_grammar(real_probe: Probe, model: str) -> None:
    grammar = 'root ::= "The answer is " answer "."\nanswer ::= "yes" | "no" | "maybe"'
    result = infer(
        real_probe, "Is the sky blue?", model, **GREEDY, **{"max-tokens": 20}, constraint={"grammar": grammar}
    )
    assert result["finish-reason"] == "stop"
    assert re.fullmatch(r"The answer is (yes|no|maybe)\.", result["text"]), result
    # The language ends after ".": generation stops there without an end-of-generation token.
    assert result["usage"]["generated-token-count"] <= 8


@pytest.mark.parametrize("model", MODELS)
def test_choice_through_infer_and_sequence(real_probe: Probe, model: str) -> None:
    options = ["positive", "negative", "neutral"]
    prompt = "Review: I loved this film, it was wonderful.\nSentiment:"
    result = infer(real_probe, prompt, model, **GREEDY, **{"max-tokens": 10}, constraint={"choice": options})
    assert result["finish-reason"] == "stop" and result["text"] in options
    script = [["open", "a"], ["append", "a", prompt], ["generate", "a", {**GREEDY, "constraint": {"choice": options}}]]
    steps = run_ok(real_probe, "seq", model, json.dumps(script))
    assert steps[2]["ok"]["text"] in options


@pytest.mark.parametrize("model", MODELS)
def test_length_gives_a_prefix_of_a_valid_text(real_probe: Probe, model: str) -> None:
    schema = SCHEMAS["nested"]
    result = infer(
        real_probe, "JSON:", model, **GREEDY, **{"max-tokens": 4}, constraint={"json-schema": json.dumps(schema)}
    )
    assert result["finish-reason"] == "length"
    assert result["text"].startswith("{")


@pytest.mark.parametrize(
    ("constraint", "needle"),
    [
        ({"json-schema": "{not json"}, "json-schema"),
        ({"json-schema": json.dumps({"type": "frobnicate"})}, "json-schema"),
        ({"regex": "a(b"}, "regex"),
        ({"grammar": "root ::= (("}, "grammar"),
        ({"choice": []}, "choice"),
    ],
)
@pytest.mark.parametrize("model", MODELS)  # constraints are compiled against each model's tokenizer
def test_bad_constraints_are_specific_invalid_input(
    real_probe: Probe, constraint: dict[str, Any], needle: str, model: str
) -> None:
    error = infer_error(real_probe, model, constraint=constraint)
    assert error["kind"] == "invalid-input"
    assert needle in error["message"], error


def test_too_many_logprobs_is_invalid_input(real_probe: Probe) -> None:
    error = infer_error(real_probe, logprobs=21)
    assert error["kind"] == "invalid-input" and "logprobs" in error["message"]


@pytest.mark.parametrize("model", MODELS)
def test_logprobs_top_five_at_temperature_zero(real_probe: Probe, model: str) -> None:
    params = {**GREEDY, "max-tokens": 12, "logprobs": 5}
    result = infer(real_probe, "The capital of France is", model, **params)
    entries = result["logprobs"]
    assert entries, result
    for entry in entries:
        assert entry["logprob"] <= 0
        assert len(entry["top"]) == 5
        assert entry["top"][0]["token-id"] == entry["token-id"]  # greedy: the sampled token is the most likely
        assert math.isclose(entry["top"][0]["logprob"], entry["logprob"], abs_tol=1e-5)
        assert sum(math.exp(t["logprob"]) for t in entry["top"]) <= 1 + 1e-5
        assert [t["logprob"] for t in entry["top"]] == sorted((t["logprob"] for t in entry["top"]), reverse=True)
    text = b"".join(bytes(e["bytes"]) for e in entries).decode("utf-8", "replace")
    assert text.startswith(result["text"][:5])
    # Chunks carry the logprobs of exactly their tokens.
    events = run_ok(real_probe, "stream", model, "The capital of France is", json.dumps(params))["events"]
    streamed = []
    for event in events:
        if event and "chunk" in event:
            chunk = event["chunk"]
            assert [e["token-id"] for e in chunk.get("logprobs", [])] == chunk["token-ids"]
            streamed.extend(chunk.get("logprobs", []))
    assert [e["token-id"] for e in streamed] == [e["token-id"] for e in entries]


@pytest.mark.parametrize("model", MODELS)
def test_logprobs_zero_reports_only_the_sampled_token_and_agree_with_the_sequence(
    real_probe: Probe, model: str
) -> None:
    params = {**GREEDY, "max-tokens": 6, "logprobs": 0}
    script = [["open", "a"], ["append", "a", "The capital of France is"], ["generate", "a", params], ["logprobs", "a"]]
    steps = run_ok(real_probe, "seq", model, json.dumps(script))
    entries = steps[2]["ok"]["logprobs"]
    assert entries and all(e["top"] == [] for e in entries)
    kept = [lp for lp in steps[3]["ok"] if lp is not None]
    # The same raw distribution as `sequence.logprobs` (the sequence may drop a cut last token).
    for entry, lp in zip(entries, kept, strict=False):
        assert math.isclose(entry["logprob"], lp, rel_tol=1e-4, abs_tol=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_a_guest_built_against_0_1_0_gets_the_same_results(
    real_probe: Probe, real_probe_0_1_0: Probe, model: str
) -> None:
    params = json.dumps({**GREEDY, "max-tokens": 10})
    new = run_ok(real_probe, "infer", model, "The capital of France is", params)
    old = run_ok(real_probe_0_1_0, "infer", model, "The capital of France is", params)
    assert old == new
    new_events = run_ok(real_probe, "stream", model, "Once upon a time", params)
    old_events = run_ok(real_probe_0_1_0, "stream", model, "Once upon a time", params)
    # How the tokens are grouped into chunks depends on how fast each reader comes back (bursts): compare what
    # timing cannot change.
    assert timing_free(old_events) == timing_free(new_events)


def timing_free(outcome: dict[str, Any]) -> dict[str, Any]:
    """A stream's events without their grouping: the text, the token ids, each chunk's running count against
    the ids reported so far, the done event and what follows it."""
    chunks = [e["chunk"] for e in outcome["events"] if e and "chunk" in e]
    reported = list(itertools.accumulate(len(c["token-ids"]) for c in chunks))
    return {
        "text": "".join(c["text"] for c in chunks),
        "token-ids": [t for c in chunks for t in c["token-ids"]],
        "counts-match": [c["usage"]["generated-token-count"] for c in chunks] == reported,
        "prompt-tokens": {c["usage"]["prompt-token-count"] for c in chunks},
        "done": outcome["events"][-1],
        "after-done": outcome["after-done"],
    }


@pytest.mark.parametrize("model", MODELS)
def test_grammar_through_a_streamed_sequence_generation(real_probe: Probe, model: str) -> None:
    grammar = 'root ::= "Answer: " ("yes" | "no") "."'
    params = {**GREEDY, "max-tokens": 12, "constraint": {"grammar": grammar}}
    script = [
        ["open", "a"],
        ["append", "a", "Is water wet? "],
        ["stream", "a", params],
        ["text", "a"],
        ["generate", "a", {**GREEDY, "max-tokens": 3}],  # the sequence goes on, unconstrained
    ]
    steps = run_ok(real_probe, "seq", model, json.dumps(script))
    events = steps[2]["ok"]
    text = "".join(e["chunk"]["text"] for e in events if e and "chunk" in e)
    assert re.fullmatch(r"Answer: (yes|no)\.", text), events
    assert events[-1]["done"]["finish-reason"] == "stop"
    assert steps[3]["ok"] == "Is water wet? " + text  # exactly what was returned was appended
    assert "ok" in steps[4]
