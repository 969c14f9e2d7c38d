"""The guest SDK (llmhost_guest) with fake bindings (tests/unit/test_guest_sdk.py's): `llm.embed` / `embed_tokens`
call the host in batches any number of inputs fits in, refuse one input too large for any call before calling, and
every SDK call checks its strings before the bindings lower them (a lone surrogate would trap the guest): an
`InvalidInput` naming the argument. tests/e2e/test_data_sizes.py and test_unicode_input.py run them in a real guest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from .test_guest_sdk import FakeLlm, sdk  # noqa: F401 (the fixture)

BAD = "ok \ud800 then"


@dataclass
class Usage:
    prompt_token_count: int


@dataclass
class Result:
    embeddings: list[list[float]]
    usage: Usage


def record_embeddings(fake: FakeLlm) -> list[list[Any]]:
    """Make the fake embed (a vector [index of the text in its call, its length]); returns the calls' inputs."""
    calls: list[list[Any]] = []

    def embed(model: str, text: list[Any]) -> Result:  # named as the binding's parameter: `text`
        calls.append(text)
        return Result([[float(i), float(len(t))] for i, t in enumerate(text)], Usage(len(text)))

    fake.generate_embeddings = embed  # type: ignore[attr-defined]
    fake.generate_embeddings_for_tokens = embed  # type: ignore[attr-defined]
    return calls


def test_embed_calls_the_host_in_batches_and_keeps_the_order(sdk: tuple[Any, FakeLlm]) -> None:  # noqa: F811
    guest, fake = sdk
    calls = record_embeddings(fake)
    texts = [f"t{i}" for i in range(5000)]
    vectors = guest.llm.embed(texts)
    assert [len(c) for c in calls] == [2048, 2048, 904]  # EMBED_BATCH inputs a call at most
    assert [c for call in calls for c in call] == texts
    assert vectors == [[float(i % 2048), float(len(t))] for i, t in enumerate(texts)]
    assert vectors.usage.prompt_tokens == 5000  # summed over the calls
    calls.clear()
    assert guest.llm.embed([]) == [] and calls == [[]]  # no inputs: one (empty) call, as before


def test_batches_stay_under_what_one_call_may_carry_out_of_the_guest(sdk: tuple[Any, FakeLlm]) -> None:  # noqa: F811
    guest, fake = sdk
    calls = record_embeddings(fake)
    guest.llm.EMBED_CALL_ITEMS = 100  # as if wasmtime allowed 100 list items per call
    long = "x" * 48 * 10  # 1 + 10 items (a text: one, plus its bytes / 48), and one for the list
    vectors = guest.llm.embed_tokens([[1] * 30] * 7)
    assert [len(c) for c in calls] == [3, 3, 1] and len(vectors) == 7  # 31 items a list: 3 per call
    calls.clear()
    assert len(guest.llm.embed([long] * 20)) == 20
    assert all(len(c) * 12 <= 100 for c in calls) and sum(map(len, calls)) == 20
    calls.clear()
    with pytest.raises(guest.InvalidInput, match=r"inputs\[2\] is too large to pass to the host in one call"):
        guest.llm.embed_tokens([[1], [2], [3] * 100])
    with pytest.raises(guest.InvalidInput, match=r"text\[1\] is too large"):
        guest.llm.embed(["short", "y" * 48 * 200])
    assert calls == []  # refused before any call: no model work for the inputs before it either


def test_sdk_calls_refuse_strings_that_are_not_valid_unicode_naming_them(sdk: tuple[Any, FakeLlm]) -> None:  # noqa: F811
    guest, fake = sdk
    calls = record_embeddings(fake)
    with pytest.raises(guest.InvalidInput, match=r"^text\[3000\] is not valid Unicode: .*'\\ud800'\) at index 3"):
        guest.llm.embed([f"t{i}" for i in range(3000)] + [BAD])
    assert calls == []  # checked whole, before the first batch
    before = len(fake.calls)
    with pytest.raises(guest.InvalidInput, match=r"^prompt is not valid Unicode"):
        guest.llm.infer(BAD)
    with pytest.raises(guest.InvalidInput, match=r"^params\.stop\[1\] is not valid Unicode"):
        guest.llm.infer("fine", stop=["x", BAD])
    assert [c for c in fake.calls[before:] if c[0] == "infer"] == []  # nothing reached the bindings
    assert guest.llm.infer("fine", stop=["x"]) == "generated"  # valid text (any Unicode) goes through
    assert guest.llm.infer("héllo \U0001f600") == "generated"
