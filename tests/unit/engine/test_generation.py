"""Property tests of `GenerationText` (token pieces in, chunks and a finish reason out) against brute force.

The reference decodes every fed token's bytes at once, cuts at the earliest stop, and finds the token after
which the cut became certain by trying every possible continuation of the text.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmhost.domain.types import FinishReason, StreamChunk
from llmhost.engine.generation import GenerationText, merge_chunks

from .utf8_reference import decode_dropping_incomplete_tail

PROPERTY = settings(max_examples=300, deadline=None)

# 1-, 2-, 3- and 4-byte characters: tokens split them at every byte offset.
ALPHABET = "aé€😀\n"
EOG_ID, EOG_PIECE = 1, b"<end_of_turn>"
PROMPT_TOKENS = 7


@cache
def futures(max_len: int) -> tuple[str, ...]:
    return tuple("".join(p) for n in range(max_len + 1) for p in itertools.product(ALPHABET, repeat=n))


def earliest(text: str, stops: Sequence[str]) -> int | None:
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found, default=None)


def cut_is_certain(text: str, stops: Sequence[str]) -> bool:
    """True when `text` has a match and no continuation can make a match start earlier (see test_text.py)."""
    if not stops:
        return False
    now = earliest(text, stops)
    return now is not None and all(earliest(text + e, stops) == now for e in futures(max(len(s) for s in stops) - 1))


def complete_chars(raw: bytes) -> str:
    """The characters whose bytes have all arrived (the input is valid UTF-8 cut anywhere)."""
    return raw.decode("utf-8", "ignore")


@dataclass(frozen=True)
class Token:
    id: int
    piece: bytes
    eog: bool = False


@dataclass(frozen=True)
class Case:
    stops: tuple[str, ...]
    tokens: tuple[Token, ...]
    max_tokens: int | None
    context_full_at: int | None  # index of the token after which the context window is full


@dataclass(frozen=True)
class Expected:
    count: int  # tokens the generation consumes
    text: str
    reason: FinishReason


def reference(case: Case) -> Expected:
    limit = len(case.tokens)
    if case.max_tokens is not None:
        limit = min(limit, case.max_tokens)
    if case.context_full_at is not None:
        limit = min(limit, case.context_full_at + 1)
    raw = b""
    for k, token in enumerate(case.tokens[:limit], start=1):
        if token.eog:
            break
        raw += token.piece
        text = complete_chars(raw)
        if cut_is_certain(text, case.stops):
            return Expected(k, text[: earliest(text, case.stops)], FinishReason.STOP)
    fed = case.tokens[:limit]
    full = decode_dropping_incomplete_tail(b"".join(t.piece for t in itertools.takewhile(lambda t: not t.eog, fed)))
    cut = earliest(full, case.stops)
    if cut is not None:
        return Expected(limit, full[:cut], FinishReason.STOP)
    return Expected(limit, full, FinishReason.STOP if fed[-1].eog else FinishReason.LENGTH)


@st.composite
def cases(draw: st.DrawFn, *, valid: bool = True) -> Case:
    stops = tuple(draw(st.lists(st.text(ALPHABET, min_size=1, max_size=3), max_size=3)))
    # Mix whole stop strings into the text so that matches are common.
    parts = st.text(ALPHABET, max_size=3) | (st.sampled_from(stops) if stops else st.nothing())
    raw = "".join(draw(st.lists(parts, max_size=8))).encode()
    if not valid:
        raw += draw(st.binary(max_size=6))
    cuts = draw(st.lists(st.integers(0, len(raw)), max_size=len(raw) + 2))
    bounds = [0, *sorted(cuts), len(raw)]
    tokens = [Token(100 + i, raw[a:b]) for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    if draw(st.booleans()) or not tokens:
        tokens.append(Token(EOG_ID, EOG_PIECE, eog=True))
    n = len(tokens)
    max_tokens = draw(st.none() | st.integers(1, n + 1))
    context_full_at = draw(st.none() | st.integers(0, n - 1))
    if not tokens[-1].eog and (max_tokens is None or max_tokens > n) and context_full_at is None:
        max_tokens = n  # a generation always ends: end-of-generation, the budget or a full context
    return Case(stops, tuple(tokens), max_tokens, context_full_at)


def run(case: Case) -> tuple[GenerationText, list[tuple[int, StreamChunk]]]:
    gen = GenerationText(case.stops, PROMPT_TOKENS, case.max_tokens)
    chunks: list[tuple[int, StreamChunk]] = []
    for i, token in enumerate(case.tokens):
        step = gen.on_token(token.id, token.piece, end_of_generation=token.eog, context_full=i == case.context_full_at)
        if step.chunk is not None:
            chunks.append((i, step.chunk))
        if step.finish is not None:
            assert gen.finish_reason == step.finish
            with pytest.raises(RuntimeError):
                gen.on_token(5, b"a", end_of_generation=False, context_full=False)
            break
        assert gen.finish_reason is None
    else:
        raise AssertionError("the generation never finished")
    return gen, chunks


def check_chunks(case: Case, gen: GenerationText, chunks: list[tuple[int, StreamChunk]]) -> None:
    fed = [t.id for t in case.tokens[: len(gen.token_ids)]]
    assert gen.token_ids == fed
    assert "".join(c.text for _, c in chunks) == gen.text
    previous = -1
    for i, chunk in chunks:
        assert chunk.text  # no empty chunks
        assert chunk.text.encode().decode() == chunk.text  # whole characters only
        # Each chunk carries exactly the tokens fed since the previous chunk, in order (but the end-of-generation
        # token, whose text is never output: however the tokens are grouped), and the running usage.
        assert list(chunk.token_ids) == [t for t in fed[previous + 1 : i + 1] if t != EOG_ID]
        assert chunk.usage.prompt_token_count == PROMPT_TOKENS
        assert chunk.usage.generated_token_count == i + 1
        previous = i


@PROPERTY
@given(cases())
@example(Case(("b", "€b"), (Token(100, b"a\xe2"), Token(101, b"\x82\xac"), Token(102, b"b")), 3, None))
@example(Case(("😀",), (Token(100, b"a\xf0\x9f"), Token(101, b"\x98\x80"), Token(EOG_ID, EOG_PIECE, True)), 2, None))
@example(Case(("aé",), (Token(100, b"a\xc3"), Token(EOG_ID, EOG_PIECE, True)), None, None))
def test_generation_matches_decode_all_then_cut(case: Case) -> None:
    gen, chunks = run(case)
    want = reference(case)
    assert gen.text == want.text
    assert gen.finish_reason == want.reason
    # Every sampled token counts as generated: end-of-generation and stop-spelling tokens included.
    assert len(gen.token_ids) == want.count
    assert gen.usage.generated_token_count == want.count
    assert gen.usage.prompt_token_count == PROMPT_TOKENS
    assert EOG_PIECE.decode() not in gen.text
    check_chunks(case, gen, chunks)
    # Valid input: a character split across tokens is never mangled; one cut off by the budget or the context
    # window is dropped, never shown as U+FFFD.
    assert "\ufffd" not in gen.text
    # token_text_end[i]: characters decoded once token i was fed (the last one includes any final flush).
    raw = b""
    for i, token in enumerate(case.tokens[: want.count - 1]):
        raw += b"" if token.eog else token.piece
        assert gen.token_text_end[i] == len(complete_chars(raw))
    assert len(gen.token_text_end) == want.count
    assert gen.token_text_end[-1] == gen.text_len


@PROPERTY
@given(cases(valid=False))
@example(Case((), (Token(100, b"\xed\xa0"),), 1, None))  # held by Python's decoder, yet never a character
def test_generation_with_invalid_bytes_decodes_like_replace(case: Case) -> None:
    gen, chunks = run(case)
    count = len(gen.token_ids)
    fed = case.tokens[:count]
    full = decode_dropping_incomplete_tail(b"".join(t.piece for t in fed if not t.eog))
    cut = earliest(full, case.stops)
    assert gen.text == (full if cut is None else full[:cut])
    # Text decoded so far; bytes of an incomplete character are still held when a stop decided before they came.
    assert gen.text_len == len(full) or (gen.stopped_by_sequence and gen.text_len == len(full.removesuffix("\ufffd")))
    if cut is not None or fed[-1].eog:
        assert gen.finish_reason == FinishReason.STOP
    else:
        assert gen.finish_reason == FinishReason.LENGTH
        assert count == case.max_tokens or count - 1 == case.context_full_at
    check_chunks(case, gen, chunks)


def run_grouped(case: Case, sizes: list[int]) -> list[tuple[int, StreamChunk]]:
    """As a scheduler's burst does: several tokens taken, then one chunk released for all their text."""
    gen = GenerationText(case.stops, PROMPT_TOKENS, case.max_tokens)
    chunks: list[tuple[int, StreamChunk]] = []
    i, groups = 0, iter(sizes)
    while gen.finish_reason is None:
        size = next(groups, 1)
        texts = []
        for token in case.tokens[i : i + size]:
            text, finish = gen.take_token(
                token.id, token.piece, end_of_generation=token.eog, context_full=i == case.context_full_at
            )
            texts.append(text)
            i += 1
            if finish is not None:
                break
        chunk = gen.release("".join(texts))
        if chunk is not None:
            chunks.append((i - 1, chunk))
    return chunks


@PROPERTY
@given(cases(), st.lists(st.integers(1, 4), max_size=12))
@example(  # a burst that ends inside a 4-byte character: its first bytes' token waits for the next chunk
    Case(
        (),
        (Token(100, b"a"), Token(101, b"\xf0\x9f"), Token(102, b"\x98\x80"), Token(EOG_ID, EOG_PIECE, True)),
        None,
        None,
    ),
    [2, 2],
)
def test_a_burst_chunk_is_the_merge_of_its_tokens_chunks(case: Case, sizes: list[int]) -> None:
    # However tokens are grouped into chunks, a chunk carries the tokens up to the last one that released text and
    # the usage as of that token: the same as merging the chunks that one token at a time would have given.
    # A token whose text is held (part of a character, a possible stop) never goes out with earlier text.
    _, single = run(case)
    grouped = run_grouped(case, sizes)
    bounds = [i for i, _ in grouped]
    want = []
    start = -1
    for end in bounds:
        part = [c for i, c in single if start < i <= end]
        start = end
        want.append(merge_chunks(part) if part else None)
    assert [c for _, c in grouped] == want


def test_stop_across_tokens_counts_every_token() -> None:
    gen = GenerationText(("END",), prompt_token_count=3, max_tokens=None)
    assert gen.on_token(10, b"Hi E", end_of_generation=False, context_full=False).chunk == StreamChunk(
        text="Hi ", token_ids=(10,), usage=gen.usage.model_copy(update={"generated_token_count": 1})
    )
    step = gen.on_token(11, b"N", end_of_generation=False, context_full=False)
    assert step.chunk is None and step.finish is None
    step = gen.on_token(12, b"D!", end_of_generation=False, context_full=False)
    assert step.finish == FinishReason.STOP and step.chunk is None
    assert gen.text == "Hi " and gen.usage.generated_token_count == 3


def test_budget_reached_while_a_stop_is_undecided_still_cuts_at_the_match() -> None:
    gen = GenerationText(("ab", "xaby"), prompt_token_count=1, max_tokens=2)
    gen.on_token(10, b"..", end_of_generation=False, context_full=False)
    step = gen.on_token(11, b"xab", end_of_generation=False, context_full=False)
    assert step.finish == FinishReason.STOP
    assert gen.text == "..x"
