"""Bounded work: the pure logic behind the bounds (log escaping, refusing oversized texts untokenized)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost import policy
from llmhost.serve.component import escape_controls, guest_lines
from llmhost.types import InvalidInput


def reference_escape(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if (code < 0x20 and ch != "\t") or code == 0x7F or 0x80 <= code <= 0x9F:
            out.append("\\x" + "0123456789abcdef"[code // 16] + "0123456789abcdef"[code % 16])
        else:
            out.append(ch)
    return "".join(out)


@given(st.text())
def test_escaping_matches_a_brute_force_reference(text: str) -> None:
    assert escape_controls(text) == reference_escape(text)


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x1FF)))
def test_an_escaped_line_has_no_control_character_but_tab(text: str) -> None:
    escaped = escape_controls(text)
    assert all(ch == "\t" or unicodedata.category(ch) != "Cc" for ch in escaped)


def test_escapes_what_erases_a_terminal_line() -> None:
    assert escape_controls("\x1b[2K\x1b[Gforged\x08\x00\t\x7f\x85ok é") == (
        "\\x1b[2K\\x1b[Gforged\\x08\\x00\t\\x7f\\x85ok é"
    )


@given(st.text())
def test_guest_output_splits_at_newlines_only_and_every_line_is_escaped(text: str) -> None:
    lines = guest_lines(text)
    assert all("\n" not in line and reference_escape(line) == line for line in lines)
    expected = text.split("\n")
    if expected[-1] == "":
        expected.pop()
    assert lines == [reference_escape(line.removesuffix("\r")) for line in expected]


def test_a_crlf_ends_a_line_and_a_lone_cr_is_shown() -> None:
    assert guest_lines("a\r\nb\rc\x85d\n\n") == ["a", "b\\x0dc\\x85d", ""]


@given(st.integers(0, 10_000), st.integers(-5, 200), st.integers(1, 64))
def test_a_text_is_refused_untokenized_exactly_when_it_cannot_fit(length: int, room: int, per_token: int) -> None:
    try:
        policy.check_text_length("prompt", length, room, 4096, per_token)
    except InvalidInput as error:
        assert length > max(room, 0) * per_token
        assert "context window of 4096 tokens" in str(error) and str(length) in str(error)
    else:
        assert length <= max(room, 0) * per_token


def test_tokenize_is_capped_in_bytes_not_characters() -> None:
    policy.check_tokenize_length("x" * policy.MAX_TOKENIZE_BYTES)
    with pytest.raises(InvalidInput, match=str(policy.MAX_TOKENIZE_BYTES)):
        policy.check_tokenize_length("é" * (policy.MAX_TOKENIZE_BYTES // 2 + 1))  # two bytes each
    with pytest.raises(InvalidInput, match="at most 1048576 bytes"):
        policy.check_tokenize_length("x" * (16 * 1024 * 1024))
