"""Brute-force UTF-8 references shared by the engine property tests."""

from __future__ import annotations


def decode_dropping_incomplete_tail(raw: bytes) -> str:
    """Brute force: invalid bytes become U+FFFD; a last character whose bytes did not all arrive is dropped."""
    for cut in range(len(raw), max(-1, len(raw) - 4), -1):
        tail = raw[cut:]
        if tail and _is_incomplete_prefix(tail):
            return raw[:cut].decode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


def _is_incomplete_prefix(tail: bytes) -> bool:
    """True when `tail` is the start of some valid multi-byte UTF-8 character, but not a whole one."""
    for length in range(len(tail) + 1, 5):
        # Try completing with continuation bytes: valid iff some completion decodes to one character.
        for filler in (b"\x80", b"\xbf", b"\x90", b"\xa0"):
            candidate = tail + filler * (length - len(tail))
            try:
                if len(candidate.decode("utf-8")) == 1:
                    return True
            except UnicodeDecodeError:
                continue
    return False
