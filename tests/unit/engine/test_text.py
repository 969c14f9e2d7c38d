"""Property tests of `llmhost.engine.text` against brute-force references over random token splits."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmhost.engine.text import StopMatcher, StopScan, Utf8Assembler

from .utf8_reference import decode_dropping_incomplete_tail

PROPERTY = settings(max_examples=300, deadline=None)


def split_at(seq: bytes, cuts: Sequence[int]) -> list[bytes]:
    """Cut `seq` at the given offsets (duplicates give empty pieces, like tokens whose piece is empty)."""
    bounds = [0, *sorted(cuts), len(seq)]
    return [seq[a:b] for a, b in itertools.pairwise(bounds)]


def split_text(text: str, cuts: Sequence[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------------------------------------------
# Utf8Assembler

# 1-, 2-, 3- and 4-byte characters (emoji, a combining mark, CJK, a musical symbol) plus anything else encodable.
MULTIBYTE = "aZ\né߿ࠀ€中🙂😀𝄞\U0010ffff\u0301"
valid_chars = st.one_of(
    st.sampled_from(MULTIBYTE),
    st.characters(exclude_categories=["Cs"], exclude_characters=["\ufffd"]),
)
valid_text = st.text(valid_chars, max_size=40)

# Byte soup that is mostly invalid in interesting ways: truncated sequences, stray continuation bytes, overlong
# forms, encoded surrogates, code points above U+10FFFF, bytes that never occur in UTF-8, and valid characters.
BAD_FRAGMENTS = [
    b"\x80",
    b"\xbf",
    b"\xc0\xaf",
    b"\xc2",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xef\xbf",
    b"\xf0\x9f",
    b"\xf0\x9f\x98",
    b"\xf4\x90\x80\x80",
    b"\xf5",
    b"\xfe",
    b"\xff",
]
any_bytes = st.lists(
    st.one_of(st.sampled_from(BAD_FRAGMENTS), st.binary(max_size=4), valid_text.map(str.encode)), max_size=12
).map(b"".join)


@st.composite
def byte_splits(draw: st.DrawFn, data: st.SearchStrategy[bytes]) -> tuple[bytes, list[bytes]]:
    raw = draw(data)
    cuts = draw(st.lists(st.integers(0, len(raw)), max_size=len(raw) + 3))
    return raw, split_at(raw, cuts)


def complete_prefix(text: str, consumed: int) -> str:
    """Brute force: the characters of `text` whose UTF-8 bytes lie entirely within the first `consumed` bytes."""
    end = 0
    for i, ch in enumerate(text):
        end += len(ch.encode())
        if end > consumed:
            return text[:i]
    return text


@st.composite
def valid_splits(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    text = draw(valid_text)
    raw = text.encode()
    return text, split_at(raw, draw(st.lists(st.integers(0, len(raw)), max_size=len(raw) + 3)))


@PROPERTY
@given(valid_splits())
@example(("😀", [b"\xf0", b"\x9f", b"", b"\x98", b"\x80"]))
@example(("a€中", [b"a\xe2", b"\x82\xac\xe4\xb8", b"\xad"]))
def test_utf8_valid_text_over_any_split(case: tuple[str, list[bytes]]) -> None:
    text, pieces = case
    asm = Utf8Assembler()
    out = ""
    consumed = 0
    for piece in pieces:
        got = asm.push(piece)
        consumed += len(piece)
        assert "\ufffd" not in got
        out += got
        # Every character is released exactly when its last byte arrives: not before, not later.
        assert out == complete_prefix(text, consumed)
        assert asm.pending() == (len(out.encode()) != consumed)
    assert asm.finish() == ""
    assert out == text
    assert not asm.pending()


@PROPERTY
@given(byte_splits(any_bytes))
@example((b"\xf0\x9fA", [b"\xf0", b"\x9f", b"A"]))
@example((b"\xed\xa0\x80", [b"\xed", b"\xa0\x80"]))
@example((b"\xe2\x82", [b"\xe2", b"\x82"]))
@example((b"\xed\xa0", [b"\xed\xa0"]))  # a surrogate's start: never a character, so U+FFFD at the end too
@example((b"\xed\xa0", [b"\xed", b"\xa0"]))
@example((b"\xf4\x90\x80", [b"\xf4\x90", b"\x80"]))  # over U+10FFFF
def test_utf8_any_bytes_decode_like_replace(case: tuple[bytes, list[bytes]]) -> None:
    raw, pieces = case
    expected = decode_dropping_incomplete_tail(raw)
    asm = Utf8Assembler()
    out = ""
    for piece in pieces:
        out += asm.push(piece)
        assert expected.startswith(out)  # nothing released is ever taken back or changed
    # bytes are held back only while they may still become a character
    assert asm.pending() == (expected != raw.decode("utf-8", "replace"))
    out += asm.finish()
    assert out == expected


def test_utf8_incomplete_tail_is_dropped() -> None:
    asm = Utf8Assembler()
    assert asm.push("a€".encode()[:-1]) == "a"
    assert asm.pending()
    assert asm.finish() == ""
    assert not asm.pending()


# ---------------------------------------------------------------------------------------------------------------
# StopMatcher

ALPHABET = "abxy\n"


@cache
def extensions(max_len: int) -> tuple[str, ...]:
    """Every string over ALPHABET of length 0..max_len."""
    return tuple("".join(p) for n in range(max_len + 1) for p in itertools.product(ALPHABET, repeat=n))


def earliest(text: str, stops: Sequence[str]) -> int | None:
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found, default=None)


def brute_force_decision(text: str, stops: Sequence[str]) -> tuple[bool, int]:
    """What a matcher that has seen `text` (more may follow) can already be sure of, found by trying every future.

    A stop string that has not started yet needs at most len(stop) - 1 more characters to complete when a proper
    prefix of it ends the text, so futures up to the longest stop minus one cover every way the result can change.
    Returns (cut certain, length of the text certain to be output).
    """
    futures = extensions(max(len(s) for s in stops) - 1)
    cuts = {earliest(text + e, stops) for e in futures}
    now = earliest(text, stops)
    if now is not None and cuts == {now}:
        return True, now
    # Output is certain up to the earliest position any future could cut at.
    return False, min([len(text), *(c for c in cuts if c is not None)])


stop_strings = st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4)


@st.composite
def stop_cases(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    stops = draw(stop_strings)
    # Mix stop strings (and their pieces) into the text so that matches and near-matches are common.
    parts = draw(st.lists(st.one_of(st.text(ALPHABET, max_size=3), st.sampled_from(stops)), max_size=10))
    text = "".join(parts)
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=len(text) + 2))
    return stops, split_text(text, cuts)


def run_matcher(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    """Push `pieces` one at a time, checking every step against the brute-force decision."""
    matcher = StopMatcher(stops)
    released = ""
    seen = ""
    for piece in pieces:
        seen += piece
        scan = matcher.push(piece)
        released += scan.release
        certain, cut = brute_force_decision(seen, stops)
        assert scan.stopped == certain == matcher.stopped, (seen, released)
        assert released == seen[:cut]
        assert earliest(released, stops) is None or certain
        if scan.stopped:
            with pytest.raises(RuntimeError):
                matcher.push("a")
            return released, True
        assert released + matcher.held == seen
    final = matcher.finish()
    released += final.release
    assert final.stopped == matcher.stopped
    return released, final.stopped


@PROPERTY
@given(stop_cases())
@example((["ab", "xaby"], ["\nx", "xab", "y"]))
@example((["ab", "xaby"], ["\nx", "xab", "b"]))
@example((["ab", "xaby"], ["\nx", "xab"]))
@example((["ab", "abab"], ["a", "b", "a", "b"]))
@example((["y", "xy"], ["xy"]))
def test_stop_matcher_cuts_at_earliest_match_as_soon_as_certain(case: tuple[list[str], list[str]]) -> None:
    stops, pieces = case
    text = "".join(pieces)
    released, stopped = run_matcher(stops, pieces)
    cut = earliest(text, stops)
    assert stopped == (cut is not None)
    assert released == (text if cut is None else text[:cut])


@PROPERTY
@given(st.text(ALPHABET), st.lists(st.integers(0, 50)))
def test_stop_matcher_without_stops_releases_everything_at_once(text: str, cuts: list[int]) -> None:
    matcher = StopMatcher([])
    for piece in split_text(text, [c for c in cuts if c <= len(text)]):
        assert matcher.push(piece) == StopScan(piece, False)
        assert matcher.held == ""
    assert matcher.finish() == StopScan("", False)


def test_stop_matcher_waits_for_a_longer_stop_that_starts_earlier() -> None:
    """The issue's example: with stops ["ab", "xaby"], "...xab" cannot be cut yet: "xaby" would start earlier."""

    def after_xab() -> StopMatcher:
        m = StopMatcher(["ab", "xaby"])
        assert m.push("...") == StopScan("...", False)
        assert m.push("xab") == StopScan("", False)
        assert m.held == "xab"
        assert not m.stopped
        return m

    assert after_xab().push("y") == StopScan("", True)  # cut before "xaby"
    assert after_xab().push("z") == StopScan("x", True)  # "xaby" is impossible now: cut before "ab"
    assert after_xab().finish() == StopScan("x", True)  # the text ended: cut before "ab"


def test_stop_matcher_stops_within_the_first_piece_and_ignores_duplicates() -> None:
    m = StopMatcher(["b", "b"])
    assert m.push("aab!") == StopScan("aa", True)
    assert m.finish() == StopScan("", True)


def test_stop_matcher_rejects_empty_stop() -> None:
    with pytest.raises(ValueError):
        StopMatcher(["a", ""])
