"""engine/constraints.py on the real Gemma 3 vocabulary (loaded vocab-only, no weights): random walks through the
allowed tokens always spell valid text, and bad constraints are refused with the parser's message."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint
from llmhost.engine.local.constraints import ConstraintCompiler, LlgConstraint
from llmhost.engine.local.llama_decoder import llama_lib
from llmhost.engine.local.models import default_model_path


@pytest.fixture(scope="module")
def vocab(llmhost_cache_dir: Path) -> Iterator[tuple[Any, Any, int]]:
    lib = llama_lib()
    params = lib.llama_model_default_params()
    params.vocab_only = True
    model = lib.llama_model_load_from_file(str(default_model_path(llmhost_cache_dir)).encode(), params)
    vocab = lib.llama_model_get_vocab(model)
    yield lib, vocab, lib.llama_vocab_n_tokens(vocab)
    lib.llama_model_free(model)


@pytest.fixture(scope="module")
def compiler(vocab: tuple[Any, Any, int]) -> ConstraintCompiler:
    lib, v, n = vocab
    return ConstraintCompiler.from_llama_vocab(lib, v, n)


def piece(vocab: tuple[Any, Any, int], token: int) -> bytes:
    import ctypes

    lib, v, _ = vocab
    buf = ctypes.create_string_buffer(256)
    n = lib.llama_token_to_piece(v, token, buf, len(buf), 0, False)
    return buf.raw[: max(n, 0)]


def walk(vocab: tuple[Any, Any, int], state: LlgConstraint, rng: random.Random, limit: int = 200) -> tuple[str, bool]:
    """Sample uniformly among allowed tokens until the language ends; returns (text, ended)."""
    lib, v, n = vocab
    eog = {int(lib.llama_vocab_eos(v)), int(lib.llama_vocab_eot(v))}
    out = b""
    for _ in range(limit):
        logits = np.zeros(n, dtype=np.float32)
        assert state.apply(logits, state.compute_mask())
        allowed = np.flatnonzero(np.isfinite(logits))
        token = int(rng.choice(allowed))
        if token in eog:
            return out.decode(), True
        out += piece(vocab, token)
        if state.advance(token):
            return out.decode(), True
    return out.decode(), False


SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 1, "maximum": 9}, "b": {"enum": ["x", "y"]}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    {
        "type": "array",
        "items": {"type": "string", "pattern": "^[a-z]{1,3}$"},
        "minItems": 1,
        "maxItems": 3,
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_random_walks_through_a_schema_always_validate(
    vocab: tuple[Any, Any, int], compiler: ConstraintCompiler, schema: dict[str, Any]
) -> None:
    rng = random.Random(0)
    for _ in range(10):
        text, ended = walk(vocab, compiler.start(Constraint.json_schema(json.dumps(schema))), rng)
        assert ended, text
        jsonschema.validate(json.loads(text), schema)


def test_regex_choice_and_gbnf_walks(vocab: tuple[Any, Any, int], compiler: ConstraintCompiler) -> None:
    rng = random.Random(1)
    for _ in range(10):
        text, _ = walk(vocab, compiler.start(Constraint.regex(r"[A-C]{2}-[0-9]{2}")), rng)
        assert re.fullmatch(r"[A-C]{2}-[0-9]{2}", text), text
        text, _ = walk(vocab, compiler.start(Constraint.choice(["red", "green", "blue sky"])), rng)
        assert text in ("red", "green", "blue sky")
        text, _ = walk(vocab, compiler.start(Constraint.grammar('root ::= "v" [0-9] ("." [0-9])?')), rng)
        assert re.fullmatch(r"v[0-9](\.[0-9])?", text), text


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        (Constraint.json_schema("{nope"), "not valid JSON"),
        (Constraint.json_schema('{"type": "frob"}'), "frob"),
        (Constraint.regex("a(b"), "unclosed group"),
        (Constraint.grammar("root ::= (("), "Expected"),
    ],
)
def test_bad_constraints_carry_the_parser_message(
    compiler: ConstraintCompiler, constraint: Constraint, message: str
) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        compiler.start(constraint)


def test_a_repeated_constraint_is_served_from_the_cache(compiler: ConstraintCompiler) -> None:
    schema = Constraint.json_schema(json.dumps({"type": "object", "properties": {"unique_key_7": {"type": "number"}}}))
    compiler.start(schema)
    assert (schema.kind, schema.text) in compiler._cache
    first, second = compiler.start(schema), compiler.start(schema)
    assert first._matcher is not second._matcher  # each generation gets its own matcher state
