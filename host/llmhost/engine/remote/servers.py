"""Per-server-kind field tables: what each OpenAI-compatible server takes for constraints and prompts."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerKind:
    """What one kind of server accepts beyond the plain OpenAI completions API."""

    tokenize_path: str | None = None  # its tokenize endpoint, from the server root (not under /v1)
    tokenize_field: str = "prompt"
    token_prompts: bool = False  # takes a list of token ids as `prompt`
    repeat_field: str | None = None  # its multiplicative repeat penalty, if any
    top_k: bool = False
    min_p: bool = False  # has a min-p sampler on by default, which ours does not use: sent as 0
    constraints: frozenset[str] = frozenset()  # constraint kinds it can enforce
    # Its tokenize endpoint gives exactly the host's `tokenize` (llmhost): a prompt is counted there, one request,
    # rather than by loading the model's vocabulary here (0.5 s for Gemma 3's 262k tokens), which only what needs
    # it then loads (chat templates, sequences, token texts).
    counts_prompts: bool = False
    # Embeds several inputs of one request wrongly, so each text goes alone (llama-cpp-python's server: a causal
    # model's per-token vectors of the second text differ from that text sent alone, measured 0.00 cosine).
    embeds_one_per_request: bool = False
    # Reports logprobs with token ids (`return_tokens_as_token_ids`) from the host's own raw distribution: a
    # generation's logprobs are the WIT's (llmhost).
    token_logprobs: bool = False
    # Ends a generation exactly at the `max_tokens` it was sent and at the `stop` strings it was sent, as the host
    # does (llmhost): a generation at its limit reads the stream to its end rather than closing it, so the server
    # sees a completed request, not a client that left.
    ends_as_sent: bool = False


_ALL = frozenset({"json-schema", "json-object", "regex", "grammar", "choice"})
_GBNF_AND_JSON = frozenset({"json-schema", "json-object", "grammar", "choice"})  # no regex in llama.cpp grammars
SERVERS: dict[str, ServerKind] = {
    "generic": ServerKind(),
    "vllm": ServerKind("/tokenize", "prompt", True, "repetition_penalty", True, True, _ALL),
    # SGLang: no tokenize endpoint relied on (versions differ); its sampling params take regex / json_schema / ebnf.
    "sglang": ServerKind(None, "prompt", True, "repetition_penalty", True, True, _ALL),
    "llama-cpp-server": ServerKind("/tokenize", "content", True, "repeat_penalty", True, True, _GBNF_AND_JSON),
    "llama-cpp-python": ServerKind(
        "/extras/tokenize", "input", False, "repeat_penalty", True, True, _GBNF_AND_JSON, embeds_one_per_request=True
    ),
    # llmhost's guest-examples/openai-compat: OpenAI's fields plus `top_k`, `repeat_penalty` and `repeat_last_n`
    # (the host's sampler, so a run against it equals a local run), token-id prompts taken as they are, and the
    # host's `tokenize` at /v1/tokenize. Its completions take every constraint (`response_format`, and its
    # `regex` / `grammar` / `choice` extensions, %llguidance grammars included: the server's host enforces them as
    # ours would) and logprobs by token id (vLLM's `return_tokens_as_token_ids`).
    "llmhost": ServerKind(
        "/v1/tokenize",
        "prompt",
        True,
        "repeat_penalty",
        True,
        constraints=_ALL,
        counts_prompts=True,
        token_logprobs=True,
        ends_as_sent=True,
    ),
}


def _gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def constraint_fields(server: str, constraint: Constraint) -> dict[str, Any]:
    """The request fields that make `server` enforce `constraint` (the caller checked it supports the kind)."""
    import json

    kind, text = constraint.kind, constraint.text
    if server == "llmhost":  # openai-compat's own fields: its host enforces each kind as this one would
        if kind == "json-schema":
            schema = {"name": "constraint", "schema": _json_or_invalid(text)}
            return {"response_format": {"type": "json_schema", "json_schema": schema}}
        if kind == "json-object":
            return {"response_format": {"type": "json_object"}}
        return {kind: list(constraint.options) if kind == "choice" else text}
    if server == "vllm":
        if kind == "json-schema":
            return {"structured_outputs": {"json": _json_or_invalid(text)}}
        fields: dict[str, dict[str, Any]] = {
            "json-object": {"json_object": True},
            "regex": {"regex": text},
            "grammar": {"grammar": text},
            "choice": {"choice": list(constraint.options)},
        }
        return {"structured_outputs": fields[kind]}
    if server == "sglang":
        if kind == "json-schema":
            return {"json_schema": text}
        if kind == "json-object":
            return {"json_schema": json.dumps({"type": "object"})}
        if kind == "regex":
            return {"regex": text}
        if kind == "grammar":
            return {"ebnf": text}
        import re

        return {"regex": "(" + "|".join(re.escape(o) for o in constraint.options) + ")"}
    if kind == "choice":
        return {"grammar": "root ::= " + " | ".join(_gbnf_literal(o) for o in constraint.options)}
    if kind == "grammar":
        return {"grammar": text}
    if server == "llama-cpp-server":
        return {"json_schema": _json_or_invalid(text) if kind == "json-schema" else {"type": "object"}}
    # llama-cpp-python's completions take only GBNF: its own converter turns the schema into one (lazy import:
    # it loads llama.cpp's library, which a host with only remote models may never need otherwise).
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if kind == "json-object":
        return {"grammar": JSON_GBNF}
    _json_or_invalid(text)
    return {"grammar": json_schema_to_gbnf(text)}


def _json_or_invalid(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"constraint json-schema is not valid JSON: {e}") from None
