"""Guest-side sampling end to end, on both built-in models: `sequence.next-token-logprobs` read by a guest
(tests/guests/sdk_probe) equals the logprobs a generation reports at the same position; a greedy loop built on it
writes what `generate(temperature=0)` writes (up to near-ties, README "Continuous batching"); seeded
`generate_with` is reproducible; processors can forbid and force tokens; and a guest that traps inside a processor
leaves nothing behind."""

from __future__ import annotations

from typing import Any

import pytest

from llmhost import App, GuestTrap, Host

from .conftest import MODELS, Probe
from .greedy import assert_same_or_split_at_near_tie

pytestmark = [pytest.mark.model, pytest.mark.wasm]
PROMPT = "The three primary colors are"


@pytest.mark.parametrize("model", MODELS)
def test_next_token_logprobs_equal_the_generations_logprobs(sdk: Probe, model: str) -> None:
    value = sdk("next", model, PROMPT, "12", "5")
    assert len(value["reads"]) == len(value["generated"]) > 0
    for step, (read, entry) in enumerate(zip(value["reads"], value["generated"], strict=True)):
        assert len(read) == 5
        logprobs = [lp for _, lp, _ in read]
        assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
        by_id = {token: lp for token, lp, _ in read}
        # The same numbers at the same position (the read is a separate sequence: batch-shape noise only)...
        for token, lp in entry["top"]:
            if token in by_id:
                assert by_id[token] == pytest.approx(lp, abs=0.1), (step, token)
        # ...and the same candidates in the same order, but where two are within that noise of each other.
        read_ids = [token for token, _, _ in read]
        top_ids = [token for token, _ in entry["top"]]
        for i, (a, b) in enumerate(zip(read_ids, top_ids, strict=True)):
            if a != b:
                assert abs(logprobs[i] - by_id.get(b, -99.0)) < 0.1, (step, read_ids, top_ids)
        # The generated token is the first candidate (greedy), and its reported logprob is the read's.
        assert entry["id"] == read_ids[0] or logprobs[0] - by_id.get(entry["id"], -99.0) < 0.1


@pytest.mark.parametrize("model", MODELS)
def test_greedy_loop_writes_what_greedy_generate_writes(sdk: Probe, real_host: Host, model: str) -> None:
    value = sdk("greedy_loop", model, PROMPT, "32")
    gen, loop, with_ = value["generate"], value["loop"], value["with"]
    assert len(gen["ids"]) > 8
    assert_same_or_split_at_near_tie(real_host, PROMPT, gen["ids"], loop["ids"], model)
    if gen["ids"] == loop["ids"]:
        assert loop["text"] == gen["text"]
    # generate_with(top=1, temperature=0) with no processors is that loop, and leaves the state exactly its text.
    assert with_["state"] == PROMPT + with_["text"]
    if with_["text"] != loop["text"]:
        with_ids = real_host.tokenize(model, PROMPT + with_["text"])[len(value["prompt_ids"]) :]
        assert_same_or_split_at_near_tie(real_host, PROMPT, loop["ids"], with_ids, model)


@pytest.mark.parametrize("model", MODELS)
def test_seeded_generate_with_is_reproducible_and_stops_exactly(sdk: Probe, model: str) -> None:
    value = sdk("seeded", model, PROMPT, "24", "7")
    runs = value["runs"]
    assert runs[0]["text"] and runs[0] == runs[1] == runs[2]
    assert value["other_seed"] != runs[0]["text"]
    for run in runs:
        assert run["state"] == PROMPT + run["text"]
        ids = run["ids"]
        grams = [tuple(ids[i : i + 3]) for i in range(len(ids) - 2)]
        assert len(grams) == len(set(grams)), "no_repeat_ngram(3) let a trigram repeat"
    # The stop ends the text just before it, and the sequence holds exactly prompt + text.
    text, stop = runs[0]["text"], value["stop"]
    assert stop and value["stopped"] == text[: text.index(stop)]
    assert value["stopped_state"] == PROMPT + value["stopped"]


@pytest.mark.parametrize("model", MODELS)
def test_processors_forbid_and_force_tokens(sdk: Probe, model: str) -> None:
    value = sdk("forbid_force", model, PROMPT, "10")
    forbid, force = value["forbid"], value["force"]
    assert forbid["ids"] and force["ids"]
    for step, token in enumerate(forbid["ids"]):
        seen = forbid["seen"][step]
        assert token != seen[0] and token == seen[1]  # the best was forbidden; greedy took the runner-up
    assert force["ids"] == force["chosen"][: len(force["ids"])]
    assert forbid["text"] != value["plain"]


@pytest.mark.parametrize("model", MODELS)
def test_a_guest_trapping_inside_a_processor_leaves_nothing_behind(
    sdk_app: App, sdk: Probe, real_host: Host, model: str
) -> None:
    engine_model: Any = real_host.engine.model(model)
    err: list[Any] = []
    with pytest.raises(GuestTrap):
        sdk_app.run(["trap_in_processor", model, PROMPT, "8"], stdout=lambda _: None, stderr=err.append)
    assert "a bug in a processor" in "".join(e.decode() if isinstance(e, bytes) else e for e in err)
    assert engine_model.slots.available == engine_model.config.slots  # every sequence and stream freed
    assert engine_model.slots.swapped_bytes == 0
    # The host keeps serving: the next guest runs on the same model.
    assert sdk("seeded", model, PROMPT, "4", "1")["runs"][0]["text"] is not None


def test_top_out_of_range_is_invalid_input(real_host: Host) -> None:
    for model in MODELS:
        seq = real_host.open_sequence(model)
        try:
            seq.append(PROMPT)
            for top in (0, 257):
                with pytest.raises(Exception, match="top must be 1 to 256") as info:
                    seq.next_token_logprobs(top)
                assert type(info.value).__name__ == "InvalidInput"
            assert len(seq.next_token_logprobs(256)) == 256
        finally:
            seq.close()
