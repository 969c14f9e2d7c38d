"""Structured output with llguidance: constraints compiled for one model's vocabulary, and per-generation matchers.

llguidance (PyPI `llguidance`) is the library llama.cpp's own `--grammar` engine, vLLM and SGLang use: it compiles
JSON Schema, regular expressions, Lark and (through its converter) llama.cpp GBNF into an Earley parser over a
lexer, and computes the set of allowed tokens of a 262k-token vocabulary in well under a millisecond per step,
where llama.cpp's built-in GBNF sampler walks every token (llama.cpp issue 7554: 85 ms per token on Gemma-size
vocabularies). The mask is a bitmask (one bit per token); `apply` sets the disallowed logits to -inf before the
sampler chain runs, so every sampler (greedy, seeded) sees only valid tokens.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from typing import Any

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint, check_constraint

# Compiled (validated, matcher built) grammars kept per model, by their text: a repeated schema costs a copy.
GRAMMAR_CACHE_SIZE = 64
# JSON output shape: compact separators, no free whitespace (a small model given free whitespace can spend its
# whole budget on newlines).
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _grammar_text(constraint: Constraint) -> str:
    """The llguidance grammar for `constraint`; raises `InvalidInput` with the parser's message for text that
    cannot even be converted (validation proper happens when the matcher is built)."""
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark

    kind = constraint.kind
    try:
        if kind == "json-schema":
            try:
                schema = json.loads(constraint.text)
            except json.JSONDecodeError as error:
                raise InvalidInput(f"constraint json-schema is not valid JSON: {error}") from None
            if not isinstance(schema, dict | bool):
                raise InvalidInput("constraint json-schema must be a JSON object (a schema)")
            return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)  # type: ignore[arg-type]
        if kind == "json-object":
            return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, overrides=JSON_OPTIONS)  # type: ignore[arg-type]
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(constraint.text)
        if kind == "choice":
            lark = "start: " + " | ".join(json.dumps(option) for option in constraint.options)
            return llguidance.LLMatcher.grammar_from_lark(lark)
        if kind == "grammar":
            text = constraint.text
            # `%llguidance` marks llguidance's own Lark syntax; anything else is read as llama.cpp GBNF.
            lark = text if text.lstrip().startswith("%llguidance") else any_to_lark(text)
            return llguidance.LLMatcher.grammar_from_lark(lark)
    except InvalidInput:
        raise
    except Exception as error:  # the converters raise ValueError and friends with their own message
        raise InvalidInput(f"constraint {kind} is invalid: {error}") from None
    raise InvalidInput(f"unknown constraint kind {kind!r}")


class LlgConstraint:
    """One generation's matcher (implements engine.constraint_mask.TokenConstraint)."""

    def __init__(self, matcher: Any, n_vocab: int) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._words = (n_vocab + 31) // 32

    def compute_mask(self) -> Any:
        import numpy as np

        mask = np.empty(self._words, dtype=np.int32)
        # Releases the GIL while it computes (the decode runs meanwhile on the other threads).
        self._matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        return mask

    def apply(self, logits: Any, mask: Any) -> bool:
        import numpy as np

        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[: self._n_vocab].view(bool)
        if not allowed.any():
            return False
        np.copyto(logits[: len(allowed)], -np.inf, where=~allowed)
        return True

    def advance(self, token: int) -> bool:
        self._matcher.consume_token(token)
        # An error state (a token the mask did not allow: impossible unless forced) ends the text like a stop.
        return bool(self._matcher.is_stopped() or self._matcher.is_error())

    @property
    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())


class ConstraintCompiler:
    """Compiles constraints for one model's vocabulary (thread-safe; one per model)."""

    def __init__(self, tokenizer: Any, n_vocab: int) -> None:
        self._tokenizer = tokenizer
        self._n_vocab = n_vocab
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_llama_vocab(cls, lib: Any, vocab: Any, n_vocab: int) -> ConstraintCompiler:
        """Build the llguidance tokenizer from a llama.cpp vocabulary (~1 s for Gemma 3's 262k tokens: once per
        model). Every end-of-generation token may end a text the grammar accepts."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        # Every end-of-generation token (Gemma 3 has three: <eos>, <end_of_turn> and another) may end a text.
        eog = [token for token in range(n_vocab) if lib.llama_vocab_is_eog(vocab, token)]
        with warnings.catch_warnings():  # it calls a deprecated llama-cpp-python alias once per token
            warnings.simplefilter("ignore", DeprecationWarning)
            return cls(lltokenizer_from_vocab(vocab, eos_token=eog or None), n_vocab)

    def start(self, constraint: Constraint) -> LlgConstraint:
        """A fresh matcher for `constraint`; raises `InvalidInput` (the parser's message) when it is invalid."""
        check_constraint(constraint)
        key = (constraint.kind, constraint.text if constraint.kind != "choice" else json.dumps(constraint.options))
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is not None:
                self._cache.move_to_end(key)
        if compiled is None:
            compiled = self._compile(constraint)
            with self._lock:
                self._cache[key] = compiled
                while len(self._cache) > GRAMMAR_CACHE_SIZE:
                    self._cache.popitem(last=False)
        return LlgConstraint(compiled.deep_copy(), self._n_vocab)

    def _compile(self, constraint: Constraint) -> Any:
        import llguidance

        grammar = _grammar_text(constraint)
        problem = llguidance.LLMatcher.validate_grammar(grammar, self._tokenizer)
        if problem:
            raise InvalidInput(f"constraint {constraint.kind} is invalid: {problem.strip()}")
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidInput(f"constraint {constraint.kind} is invalid: {matcher.get_error()}")
        return matcher
