"""Bounded work: the pure logic behind the bounds (log escaping, refusing oversized texts untokenized)."""

from __future__ import annotations

import asyncio
import errno
import resource
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import FD_RESERVE, FDS_PER_REQUEST, MAX_TOKENIZE_BYTES
from llmhost.domain.types import check_text_length, check_tokenize_length
from llmhost.shell.front import DescriptorWarnings, plan_descriptors
from llmhost.shell.guest import escape_controls, guest_lines
from llmhost.shell.protocol import chunk_problem, framing_problem


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
        check_text_length("prompt", length, room, 4096, per_token)
    except InvalidInput as error:
        assert length > max(room, 0) * per_token
        assert "context window of 4096 tokens" in str(error) and str(length) in str(error)
    else:
        assert length <= max(room, 0) * per_token


def test_tokenize_is_capped_in_bytes_not_characters() -> None:
    check_tokenize_length("x" * MAX_TOKENIZE_BYTES)
    with pytest.raises(InvalidInput, match=str(MAX_TOKENIZE_BYTES)):
        check_tokenize_length("é" * (MAX_TOKENIZE_BYTES // 2 + 1))  # two bytes each
    with pytest.raises(InvalidInput, match="at most 1048576 bytes"):
        check_tokenize_length("x" * (16 * 1024 * 1024))


# --- serve: descriptors and framing --------------------------------------------------------------------------

INF = resource.RLIM_INFINITY
RESERVE_16 = FD_RESERVE + FDS_PER_REQUEST * 16


@pytest.mark.parametrize(
    ("soft", "hard", "expected"),
    [
        (1024, 4096, (1024, 256)),  # enough already
        (INF, INF, (INF, 256)),
        (256, 4096, (256 + RESERVE_16, 256)),  # raised to what is needed
        (256, INF, (256 + RESERVE_16, 256)),
        (100, 300, (300, 300 - RESERVE_16)),  # raised to the hard limit, connections lowered to fit
        (50, 50, (50, 1)),  # never below one connection
    ],
)
def test_descriptor_plan(soft: int, hard: int, expected: tuple[int, int]) -> None:
    assert plan_descriptors(256, 16, soft, hard) == expected


@given(st.integers(1, 5000), st.integers(1, 64), st.integers(1, 10_000), st.integers(1, 10_000))
def test_descriptor_plan_never_lowers_or_overshoots(connections: int, concurrency: int, soft: int, hard: int) -> None:
    soft = min(soft, hard)
    new_soft, served = plan_descriptors(connections, concurrency, soft, hard)
    assert soft <= new_soft <= hard and 1 <= served <= connections
    reserve = FD_RESERVE + FDS_PER_REQUEST * concurrency
    assert served == connections or served + reserve == new_soft or served == 1


def test_running_out_of_descriptors_warns_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    warnings = DescriptorWarnings(clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    try:
        for step in range(1000):
            now[0] = step * 0.05  # 50 s of accept failures, 20 a second
            warnings.handle(loop, {"message": "accept", "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    lines = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert len(lines) == 5
    assert "more since the last warning" in lines[1].getMessage()


@pytest.mark.parametrize(
    ("received", "problem"),
    [
        (b"GET /\r\n", "HTTP/0.9"),
        (b"GET /\n", "HTTP/0.9"),
        (b"\x16\x03\x01\x02\x00\x01\x00\n", "malformed"),
        (b"GET / HTTP/1.1\r\n", None),
        (b"\r\nPOST /x?y=1 HTTP/1.0\r\nHost: a\r\n", None),
        (b"GET / HTTP/1.1", None),  # not a whole line yet
    ],
)
def test_framing_problem(received: bytes, problem: str | None) -> None:
    found = framing_problem(received)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_chunk_problem() -> None:
    assert chunk_problem(int("f" * 20, 16), 1 << 20) == (400, f"chunk size {'f' * 20} is out of range")
    refused = chunk_problem((1 << 20) + 1, 1 << 20)
    assert refused is not None and refused[0] == 413
    assert chunk_problem(1 << 20, 1 << 20) is None
