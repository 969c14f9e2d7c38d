"""Pure text logic of generation: incremental UTF-8 assembly and the stop-sequence matcher.

Both are property-tested against brute-force references (tests/unit/engine/test_text.py).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass


class Utf8Assembler:
    """Turns token byte pieces into text, never splitting a character across outputs.

    A character whose bytes span several tokens is released when its last byte arrives. Bytes that can never
    form a valid character become U+FFFD, as `bytes.decode("utf-8", "replace")` does. An incomplete character
    at the very end (the token budget ran out inside it) is dropped rather than shown as U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        text = self._decoder.decode(piece)
        held = self._decoder.getstate()[0]
        if held and not _completable(held):
            # Python's incremental decoder also holds a lead byte followed by a second byte it cannot take
            # (b"\xed\xa0", a surrogate's start): no later byte can make these a character, so they are U+FFFD
            # now, as a whole-text decode makes them.
            self._decoder.reset()
            text += held.decode("utf-8", "replace")
        return text

    def pending(self) -> bool:
        """True while an incomplete character is held back."""
        return bool(self._decoder.getstate()[0])

    def finish(self) -> str:
        """End of input: drop the bytes of an incomplete last character (there is nothing to release)."""
        self._decoder.reset()
        return ""


# The second byte each lead byte allows where it is not 80-BF (UTF-8 has no overlong forms, surrogates or code
# points over U+10FFFF).
_SECOND_BYTE = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


def _completable(held: bytes) -> bool:
    """Whether the bytes the decoder holds (a lead byte and fewer continuation bytes than it needs) can still end
    as one valid character: only the second byte's range depends on the lead."""
    if len(held) < 2:
        return True
    low, high = _SECOND_BYTE.get(held[0], (0x80, 0xBF))
    return low <= held[1] <= high


@dataclass(frozen=True)
class StopScan:
    """What a push into `StopMatcher` decided."""

    release: str  # text now certain to be part of the output
    stopped: bool  # a stop sequence matched and no earlier match is still possible


class StopMatcher:
    """Finds the earliest-starting occurrence of any stop string in a growing text, as early as it is certain.

    Text is released only when no stop string can start inside it. When a stop string has matched at position p
    but another could still match starting before p (the text ends with a proper prefix of it), the matcher waits.
    The released text over the whole generation equals "the full text, cut at the earliest-starting match".
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(s == "" for s in stops):
            raise ValueError("empty stop string")
        self._stops = tuple(dict.fromkeys(stops))
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""  # text not yet released: it may begin a stop string
        self.stopped = False

    @property
    def held(self) -> str:
        return self._held

    def push(self, text: str) -> StopScan:
        if self.stopped:
            raise RuntimeError("push after a stop matched")
        buf = self._held + text
        if not self._stops:
            self._held = ""
            return StopScan(buf, False)
        match = self._earliest_match(buf)
        partial = self._earliest_partial(buf)
        if match is not None and (partial is None or match <= partial):
            self._held = ""
            self.stopped = True
            return StopScan(buf[:match], True)
        keep_from = len(buf) if partial is None else partial
        self._held = buf[keep_from:]
        return StopScan(buf[:keep_from], False)

    def finish(self) -> StopScan:
        """No more text will come: partial matches can no longer complete."""
        if self.stopped:
            return StopScan("", True)
        buf, self._held = self._held, ""
        match = self._earliest_match(buf)
        if match is not None:
            self.stopped = True
            return StopScan(buf[:match], True)
        return StopScan(buf, False)

    def _earliest_match(self, buf: str) -> int | None:
        found = [i for i in (buf.find(s) for s in self._stops) if i >= 0]
        return min(found) if found else None

    def _earliest_partial(self, buf: str) -> int | None:
        """Earliest position whose suffix is a proper prefix of some stop string (a match still possible)."""
        n = len(buf)
        for q in range(max(0, n - self._longest + 1), n):
            tail = buf[q:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self._stops):
                return q
        return None


def attribute_text(pieces: Sequence[bytes], text: str) -> list[str]:
    """Split `text` over the tokens it was tokenized into: each token gets the characters its bytes complete.

    When the pieces do not spell `text` exactly (a tokenizer that normalizes), the whole text goes to the last
    token, so that the joined texts always equal `text`.
    """
    assembler = Utf8Assembler()
    parts = [assembler.push(piece) for piece in pieces]
    if "".join(parts) == text and not assembler.pending():
        return parts
    return [""] * (len(pieces) - 1) + [text] if pieces else []
