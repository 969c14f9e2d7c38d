"""`Host.embeddings` checks its input once (domain/types.py `embedding_inputs`), and every text of the Python API must
be valid Unicode (issue 49, defects 3 and 11): wrong shapes and lone surrogates are `InvalidInput` saying what was
expected, never a raw TypeError / UnicodeEncodeError, nor a float, bool, bytes or bare string taken as token ids.
On the fake engine (the checks come before any engine); tests/e2e/test_unicode_input.py runs the real model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmhost import FakeEngineConfig, Host, HostConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint, InferencingParams, embedding_inputs

MODEL = "gemma-3-270m"
BAD = "ok \ud800 then"  # what json.loads makes of "ok \\ud800 then"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    cache: Path = tmp_path_factory.mktemp("cache")
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=cache)) as running:
        yield running


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([[1.5, 2]], r"inputs\[0\]\[0\] is 1.5 \(float\): token ids are integers"),
        ([[3, True]], r"inputs\[0\]\[1\] is True \(bool\): token ids are integers"),
        ([[1, "x"]], r"inputs\[0\]\[1\] is 'x' \(str\): token ids are integers"),
        (b"hello", r"not bytes: decode them first"),
        (bytearray(b"hi"), r"not bytes"),
        ("hello", r"not a single string: pass \[text\] for one vector"),
        (None, r"not NoneType"),
        ({"a": 1}, r"not dict"),
        (["fine", 7], r"inputs\[1\] is a int: each input is a text \(str\) or a list of token ids"),
        (["fine", BAD], r"inputs\[1\] is not valid Unicode: it holds a lone surrogate \('\\ud800'\) at index 3"),
    ],
)
def test_wrong_inputs_are_invalid_input_saying_what_was_expected(host: Host, texts: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        host.embeddings(MODEL, texts)


def test_valid_inputs_of_every_shape_are_embedded(host: Host) -> None:
    assert len(host.embeddings(MODEL, ["a", [5, 6], (9, 10)]).embeddings) == 3
    assert len(host.embeddings(MODEL, ("x", [np.int64(7), 8])).embeddings) == 2  # numpy ids are integers too
    assert embedding_inputs([(1, 2), "t"]) == [[1, 2], "t"]  # tuples of ids become lists, once
    assert host.embeddings(MODEL, []).embeddings == []


def test_every_text_of_the_python_api_must_be_valid_unicode(host: Host) -> None:
    """Host.embeddings raised a raw UnicodeEncodeError (defect 3): each text is checked, naming it."""
    calls = {
        "prompt": lambda: host.infer(MODEL, BAD),
        "prompt ": lambda: host.infer_stream(MODEL, BAD),
        "text": lambda: host.tokenize(MODEL, BAD),
        r"inputs\[0\]": lambda: host.embeddings(MODEL, [BAD]),
        r"stop\[1\]": lambda: InferencingParams(stop=("x", BAD)),
        r"constraint choice\[0\]": lambda: InferencingParams(constraint=Constraint.choice([BAD])),
        "constraint regex": lambda: InferencingParams(constraint=Constraint.regex(BAD)),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInput, match=rf"^{name.strip()} is not valid Unicode"):
            call()
