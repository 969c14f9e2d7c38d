"""Logits processors that run in the guest: `Sequence.generate_with` reads the next-token candidates from the
host (`sequence.next-token-logprobs`), lets each processor change them, samples with its own seeded RNG, and
appends the token (`sequence.append-tokens`). The host decodes every guest's step in its shared batch.

A candidate is `(token_id, logprob, piece_bytes)`; a processor is `(seq, candidates) -> candidates`. It may
drop candidates (forbid), change their logprobs (bias, penalties, contrast with another model or prompt), or
return a single one (force). Bytes are what the text is made of: a candidate a processor adds must carry its
token's bytes. A token with no bytes (a control token: end of turn, end of text) ends the generation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from typing import Any

Candidate = tuple[int, float, bytes]
# (seq, candidates) -> candidates; `seq` is the `Sequence` being generated (typed loosely: this module is below it).
Processor = Callable[[Any, list[Candidate]], Iterable[Candidate]]


def choose(candidates: Seq[Candidate], temperature: float, rng: random.Random) -> Candidate:
    """Sample one candidate from softmax(logprob / temperature); temperature 0 takes the most likely (the first
    of equals)."""
    if temperature <= 0:
        return max(candidates, key=lambda c: c[1])  # max keeps the first of equals
    finite = [c for c in candidates if c[1] != -math.inf]
    if not finite:
        return candidates[0]
    peak = max(c[1] for c in finite)
    weights = [math.exp((c[1] - peak) / temperature) for c in finite]
    point = rng.random() * math.fsum(weights)
    for candidate, weight in zip(finite, weights, strict=True):
        point -= weight
        if point < 0:
            return candidate
    return finite[-1]


class GeneratedText:
    """The text of the tokens `generate_with` appends, with exact stops (pure: the sequence calls live in
    `Sequence.generate_with`). `feed` each token's bytes; once it returns True (a stop matched) or the loop ends,
    `text` is the text to return and `settle()` says how to make the sequence exactly prompt + text."""

    def __init__(self, stop: str | Iterable[str] = ()) -> None:
        self.stops = [s for s in ([stop] if isinstance(stop, str) else stop) if s]  # "" stops nothing
        self.data = b""  # the bytes of the generated tokens
        self.ends: list[int] = []  # per generated token: where its bytes end in `data`
        self.text = ""  # the text to return: whole characters only, cut before a stop

    def feed(self, piece: bytes) -> bool:
        """Account for one appended token's bytes; True when a stop sequence matched (the text ends before it)."""
        self.data += piece
        self.ends.append(len(self.data))
        self.text = self.data[: _complete_prefix(self.data)].decode("utf-8", "ignore")
        since = len(self.text) - len(piece) - max((len(s) for s in self.stops), default=0)
        hit = _first_stop(self.text, self.stops, since)
        if hit is not None:
            self.text = self.text[:hit]
        return hit is not None

    def settle(self) -> tuple[int, str]:
        """(generated tokens to keep, text to append after them) so that the sequence holds exactly the text: the
        longest run of tokens inside it that ends on a character boundary keeps its KV cache; the rest of the text
        (the kept part of a cut token, and of a character split across tokens) is re-appended."""
        kept = self.text.encode("utf-8")
        whole = 0  # kept tokens: inside the text, and the last one ending on a character boundary
        for count, end in enumerate(self.ends, 1):
            if end > len(kept):
                break
            if _complete_prefix(kept[:end]) == end:
                whole = count
        return whole, kept[self.ends[whole - 1] if whole else 0 :].decode("utf-8")


def _complete_prefix(data: bytes) -> int:
    """The length of the longest prefix of `data` that ends on a whole UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data) if back == 1 else len(data) - back + 1
        if byte >= 0xC0:  # a lead byte: is its character whole?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _first_stop(text: str, stops: list[str], since: int) -> int | None:
    """Where the earliest stop sequence begins in `text`, looking at matches that end in new text only."""
    found = [i for i in (text.find(s, max(0, since)) for s in stops) if i >= 0]
    return min(found) if found else None


def no_repeat_ngram(n: int) -> Processor:
    """Forbid any token that would complete an n-gram already in the sequence (prompt included)."""

    def processor(seq: Any, candidates: list[Candidate]) -> list[Candidate]:
        ids = seq.token_ids
        if n < 1 or len(ids) < n - 1:
            return candidates
        prefix = tuple(ids[len(ids) - n + 1 :]) if n > 1 else ()
        banned = {ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i : i + n - 1]) == prefix}
        return [c for c in candidates if c[0] not in banned]

    return processor


def forbid(token_ids: Iterable[int]) -> Processor:
    """Never choose these tokens."""
    banned = set(token_ids)
    return lambda _seq, candidates: [c for c in candidates if c[0] not in banned]
