"""OpenAI wire shapes without a model: openai-compat's request checks for token-id prompts and inputs and `echo`
(guest-examples/openai-compat/validate.py is plain Python), and token-id embeddings on the fake engine."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from llmhost import InvalidInput
from llmhost.engine.fake import FakeEngine
from openai_compat_validate import load_validate


@pytest.fixture(scope="module")
def validate() -> ModuleType:
    return load_validate()


@pytest.mark.parametrize(
    ("prompt", "items", "names"),
    [
        ("Hi", ["Hi"], ["prompt[0]"]),
        (["a", "b"], ["a", "b"], ["prompt[0]", "prompt[1]"]),
        ([1, 2, 3], [[1, 2, 3]], ["prompt"]),
        ([[1, 2], [3]], [[1, 2], [3]], ["prompt[0]", "prompt[1]"]),
    ],
)
def test_every_prompt_shape_of_the_spec_is_accepted(validate: Any, prompt: Any, items: Any, names: Any) -> None:
    req = validate.completion_request({"prompt": prompt})
    assert req.prompt == items and req.prompt_names == names


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, -2]}, "prompt[1]"),
        ({"prompt": [[1], [2, True]]}, "prompt[1][1]"),
        ({"prompt": [[1], []]}, "prompt[1]"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [{"x": 1}]}, "prompt[0]"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),  # 0 only with echo
        ({"prompt": "x", "echo": "yes"}, "echo"),
    ],
)
def test_malformed_prompts_name_the_element(validate: Any, body: Any, param: str) -> None:
    with pytest.raises(validate.BadRequest) as caught:
        validate.completion_request(body)
    assert caught.value.param == param and caught.value.status == 400


def test_echo_with_no_tokens_and_embedding_inputs(validate: Any) -> None:
    req = validate.completion_request({"prompt": [[5, 6]], "echo": True, "max_tokens": 0, "logprobs": 10})
    assert req.echo and req.max_tokens == 0 and req.params["logprobs"] == 10
    req = validate.embedding_request({"input": [[5, 6], "text"]})
    assert req.input == [[5, 6], "text"] and req.input_names == ["input[0]", "input[1]"]
    with pytest.raises(validate.BadRequest) as caught:
        validate.embedding_request({"input": ["a", ""]})
    assert caught.value.param == "input[1]"


def test_fake_engine_embeds_token_ids_as_their_text_and_counts_them() -> None:
    engine = FakeEngine(models=("m",))
    ids = engine.tokenize("m", "hello")
    as_text = engine.embeddings("m", ["hello"])
    as_ids = engine.embeddings("m", [ids])
    assert as_ids.embeddings == as_text.embeddings
    assert as_ids.prompt_token_count == as_text.prompt_token_count == len(ids)
    with pytest.raises(InvalidInput, match=r"inputs\[1\]\[0\] = 100000 is not a token of m"):
        engine.embeddings("m", [ids, [100_000]])
    with pytest.raises(InvalidInput, match=r"inputs\[0\] is empty"):
        engine.embeddings("m", [[]])
