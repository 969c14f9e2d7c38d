"""The `llm` interface end to end: probe guest component → host → llama.cpp with Gemma 3 270M.

Expected values come from the model itself (a reference run through the same path), never hard-coded text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from llmhost import Host, InferencingParams
from llmhost.domain.types import StreamChunk
from probe_driver import ProbeOutcome

from .conftest import MODEL, SMALL, SMALL_CONTEXT

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]

GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0}
STORY = "Once upon a time, there was a dragon who"


def infer(probe: Probe, prompt: str, model: str = MODEL, **params: Any) -> dict[str, Any]:
    outcome = probe("infer", model, prompt, json.dumps(params))
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr)
    value: dict[str, Any] = outcome.value
    return value


def infer_error(probe: Probe, prompt: str, model: str = MODEL, **params: Any) -> dict[str, str]:
    outcome = probe("infer", model, prompt, json.dumps(params))
    assert outcome.exit_code == 1 and outcome.error is not None, outcome
    return outcome.error


def token_texts(host: Host, prompt: str, max_tokens: int, model: str = MODEL) -> list[tuple[int, bytes]]:
    """Greedy reference: every generated token id with its bytes, through the Python API on the same engine."""
    gen = host.engine.engine(model).stream(
        model, prompt, InferencingParams(max_tokens=max_tokens, temperature=0, repeat_penalty=1)
    )
    ids = [t for event in gen if isinstance(event, StreamChunk) for t in event.token_ids]
    loaded = host.engine.model(model)  # type: ignore[attr-defined]
    return [(t, loaded.piece(t)) for t in ids]


def test_greedy_infer_reports_usage_that_matches_tokenize(real_probe: Probe) -> None:
    result = infer(real_probe, "The capital of France is", **GREEDY, **{"max-tokens": 12})
    tokens = real_probe("tokenize", MODEL, "The capital of France is").value
    assert result["usage"] == {"prompt-token-count": len(tokens), "generated-token-count": 12}
    assert result["finish-reason"] == "length"
    assert result["text"].strip()
    # Greedy is deterministic: the same call gives the same text.
    assert infer(real_probe, "The capital of France is", **GREEDY, **{"max-tokens": 12}) == result


def test_params_none_uses_the_documented_defaults(real_probe: Probe) -> None:
    outcome = real_probe("infer", MODEL, STORY, "none")
    assert outcome.exit_code == 0, outcome
    # max-tokens defaults to 100: the story prompt never ends early under these defaults' penalties and sampling
    # unless the model emits end-of-generation, which this base model does not do within 100 tokens here.
    assert outcome.value["usage"]["generated-token-count"] <= 100
    assert outcome.value["finish-reason"] in ("length", "stop")


def test_special_token_text_in_the_prompt_is_parsed_as_special_tokens(real_probe: Probe, real_host: Host) -> None:
    chat = "<start_of_turn>user\nHi<end_of_turn>\n"
    tokens = real_probe("tokenize", MODEL, chat).value
    plain = real_probe("tokenize", MODEL, "user\nHi\n").value
    # Two marker tokens more than the same text without markers: each marker is one special token.
    assert len(tokens) == len(plain) + 2
    assert set(tokens) - set(plain) == {105, 106}  # Gemma 3's <start_of_turn> and <end_of_turn>
    result = infer(real_probe, chat, **GREEDY, **{"max-tokens": 2})
    assert result["usage"]["prompt-token-count"] == len(tokens)


def test_max_tokens_none_ends_on_end_of_generation(real_probe: Probe) -> None:
    # With the prompt's "}" tokens penalized, end-of-generation is the most likely next token: this shows both
    # that generation ends there (finish `stop`, EOG counted, its text not returned) and that the repeat
    # penalty covers the prompt.
    penalized = infer(real_probe, "}\n}\n}\n", **{"max-tokens": None, "temperature": 0.0, "repeat-penalty": 1.3})
    assert penalized == {
        "text": "",
        "finish-reason": "stop",
        "usage": {"prompt-token-count": 7, "generated-token-count": 1},
    }
    # The penalty window is respected: with last-n 0 nothing is penalized and the braces go on.
    unpenalized = infer(
        real_probe,
        "}\n}\n}\n",
        **{"max-tokens": 8, "temperature": 0.0, "repeat-penalty": 1.3, "repeat-penalty-last-n-token-count": 0},
    )
    assert unpenalized["usage"]["generated-token-count"] == 8
    assert unpenalized["text"].startswith("}")


def test_max_tokens_none_stops_when_the_context_window_is_full(real_probe: Probe) -> None:
    prompt = "1, 2, 3, 4, 5"
    result = infer(real_probe, prompt, model=SMALL, **GREEDY, **{"max-tokens": None})
    usage = result["usage"]
    assert result["finish-reason"] == "length"
    assert usage["prompt-token-count"] + usage["generated-token-count"] == SMALL_CONTEXT
    assert ", 6, 7" in result["text"]


def earliest(text: str, stops: list[str]) -> int | None:
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def tokens_to_decide(pieces: list[bytes], stops: list[str]) -> int:
    """Brute force: the fewest generated tokens after which the stop cut can no longer change."""
    for k in range(1, len(pieces) + 1):
        text = b"".join(pieces[:k]).decode("utf-8", "ignore")
        cut = earliest(text, stops)
        if cut is None:
            continue
        pending = any(len(s) > len(text) - q and s.startswith(text[q:]) for q in range(cut) for s in stops)
        if not pending:
            return k
    raise AssertionError("no stop matched in the reference text")


def test_stop_sequences_cut_at_the_earliest_start_and_halt_as_soon_as_certain(
    real_probe: Probe, real_host: Host
) -> None:
    reference = token_texts(real_host, STORY, 40)
    pieces = [p for _, p in reference]
    text = b"".join(pieces).decode()
    # A stop string that begins inside one token and ends inside another.
    ends = [len(b"".join(pieces[: k + 1]).decode("utf-8", "ignore")) for k in range(len(pieces))]
    boundary = next(e for e in ends if e >= 12 and text[e - 2 : e + 2].strip() == text[e - 2 : e + 2])
    spanning = text[boundary - 2 : boundary + 2]
    later = text[boundary + 6 : boundary + 10]
    assert text.find(spanning) == boundary - 2 and text.find(later) > boundary - 2
    stops = [later, spanning]  # listed later-first: the earliest-starting match must win, not list order
    result = infer(real_probe, STORY, **GREEDY, **{"max-tokens": 40, "stop": stops})
    assert result["text"] == text[: boundary - 2]
    assert result["finish-reason"] == "stop"
    assert result["usage"]["generated-token-count"] == tokens_to_decide(pieces, stops)

    # The example: "ab" has matched, but "xaby" may still match earlier, so generation goes on until
    # the longer one is decided; here it does match and wins.
    x = boundary + 3
    ab, xaby = text[x + 1 : x + 3], text[x : x + 4]
    result = infer(real_probe, STORY, **GREEDY, **{"max-tokens": 40, "stop": [ab, xaby]})
    assert result["text"] == text[: earliest(text, [ab, xaby])]
    assert result["usage"]["generated-token-count"] == tokens_to_decide(pieces, [ab, xaby])
    # ... and here the longer one turns out not to match, so the shorter one wins, decided one character later.
    wrong = text[x : x + 3] + "\x07"
    result = infer(real_probe, STORY, **GREEDY, **{"max-tokens": 40, "stop": [ab, wrong]})
    assert result["text"] == text[: earliest(text, [ab, wrong])]
    assert result["usage"]["generated-token-count"] == tokens_to_decide(pieces, [ab, wrong])


def test_a_character_split_across_tokens_is_assembled(real_probe: Probe, real_host: Host) -> None:
    prompt = "🫎🫎🫎 🫎🫎 🫎🫎🫎 🫎"  # the moose emoji has no token of its own: four byte tokens each
    reference = token_texts(real_host, prompt, 12)
    assert any(len(piece) == 1 and piece[0] >= 0x80 for _, piece in reference), "no byte-level token generated"
    for max_tokens in range(6, 13):
        result = infer(real_probe, prompt, **GREEDY, **{"max-tokens": max_tokens})
        raw = b"".join(p for _, p in reference[:max_tokens])
        # Exactly the complete characters of the generated bytes: nothing dropped, mangled or replaced; a
        # character cut off by max-tokens is left out rather than shown as U+FFFD.
        assert result["text"] == raw.decode("utf-8", "ignore")
        assert "\ufffd" not in result["text"]
    assert "🫎" in result["text"]


def test_seed_makes_sampling_reproducible_and_no_seed_is_random(real_probe: Probe) -> None:
    hot = {"temperature": 1.5, "top-k": 0, "top-p": 1.0, "max-tokens": 24}
    first = infer(real_probe, STORY, **hot, seed=7)
    assert infer(real_probe, STORY, **hot, seed=7) == first
    assert any(infer(real_probe, STORY, **hot, seed=s)["text"] != first["text"] for s in (8, 9))
    unseeded = {infer(real_probe, STORY, **hot)["text"] for _ in range(3)}
    assert len(unseeded) > 1


def test_top_k_one_is_greedy_and_zero_disables_it(real_probe: Probe) -> None:
    greedy = infer(real_probe, STORY, **GREEDY, **{"max-tokens": 16})
    top1 = infer(real_probe, STORY, **{"temperature": 1.5, "top-k": 1, "repeat-penalty": 1.0, "max-tokens": 16})
    assert top1["text"] == greedy["text"]
    unrestricted = {"temperature": 1.5, "top-k": 0, "top-p": 1.0, "repeat-penalty": 1.0, "max-tokens": 16}
    assert any(infer(real_probe, STORY, **unrestricted, seed=s)["text"] != greedy["text"] for s in (1, 2, 3))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"temperature": -0.5}, "temperature"),
        ({"top-p": 0.0}, "top-p"),
        ({"top-p": 1.5}, "top-p"),
        ({"repeat-penalty": 0.0}, "repeat-penalty"),
        ({"stop": ["ok", ""]}, "stop[1]"),
        ({"max-tokens": 0}, "max-tokens"),
    ],
)
def test_invalid_params_are_invalid_input_naming_the_field(
    real_probe: Probe, params: dict[str, Any], field: str
) -> None:
    error = infer_error(real_probe, "Hello", **params)
    assert error["kind"] == "invalid-input"
    assert error["message"].startswith(field)


def test_a_prompt_longer_than_the_context_is_invalid_input_with_both_numbers(real_probe: Probe) -> None:
    prompt = "word " * 100
    tokens = len(real_probe("tokenize", SMALL, prompt).value)
    error = infer_error(real_probe, prompt, model=SMALL)
    assert error["kind"] == "invalid-input"
    assert str(tokens) in error["message"] and str(SMALL_CONTEXT) in error["message"]
    # The host keeps serving the same guest afterwards.
    assert infer(real_probe, "Hello", model=SMALL, **GREEDY, **{"max-tokens": 2})["usage"]["generated-token-count"] == 2


def test_unknown_model_is_model_not_supported(real_probe: Probe) -> None:
    assert infer_error(real_probe, "Hello", model="no-such-model")["kind"] == "model-not-supported"
    outcome = real_probe("tokenize", "no-such-model", "Hello")
    assert outcome.error is not None and outcome.error["kind"] == "model-not-supported"


def test_model_info(real_probe: Probe) -> None:
    assert real_probe("info", MODEL).value == {"name": MODEL, "context-length": 4096, "vocab-size": 262144}
    assert real_probe("info", SMALL).value["context-length"] == SMALL_CONTEXT


def test_embeddings_are_normalized_and_meaningful(real_probe: Probe) -> None:
    texts = ["The cat sat on the mat.", "A cat was sitting on a mat.", "Quarterly revenue rose by four percent."]
    outcome = real_probe("embed", MODEL, *texts)
    assert outcome.exit_code == 0, outcome
    vectors = outcome.value["embeddings"]
    assert len(vectors) == 3 and all(len(v) == 640 for v in vectors)
    for v in vectors:
        assert math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-4)

    def cos(a: list[float], b: list[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2])
    tokens = sum(len(real_probe("tokenize", MODEL, t).value) for t in texts)
    assert outcome.value["usage"]["prompt-token-count"] == tokens
