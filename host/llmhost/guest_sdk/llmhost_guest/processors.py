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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sequence import Sequence

Candidate = tuple[int, float, bytes]
Processor = Callable[["Sequence", list[Candidate]], Iterable[Candidate]]


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


def generate_with(
    seq: Sequence,
    processors: Iterable[Processor],
    *,
    max_tokens: int,
    top: int = 64,
    temperature: float = 1.0,
    seed: int | None = None,
    stop: str | Iterable[str] = (),
) -> str:
    """See `Sequence.generate_with`."""
    procs = list(processors)
    stops = [stop] if isinstance(stop, str) else [s for s in stop if s]
    rng = random.Random(seed)
    start = seq.token_count
    data = b""  # the bytes of the generated tokens
    ends: list[int] = []  # per generated token: where its bytes end in `data`
    text = ""
    for _ in range(max_tokens):
        candidates: list[Candidate] = seq.next_token_logprobs(top)
        for processor in procs:
            candidates = list(processor(seq, candidates))
        if not candidates:
            break  # the processors allow nothing: end as the language would
        token, _, piece = choose(candidates, temperature, rng)
        if not piece:
            break  # end of generation (a control token is never appended)
        seq._append_generated(token)
        data += piece
        ends.append(len(data))
        text = data[: _complete_prefix(data)].decode("utf-8", "ignore")
        hit = _first_stop(text, stops, len(text) - len(piece) - max((len(s) for s in stops), default=0))
        if hit is not None:
            return _settle(seq, start, text[:hit], ends)
    return _settle(seq, start, text, ends)


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


def _settle(seq: Sequence, start: int, kept: str, ends: list[int]) -> str:
    """Make the sequence exactly its prompt plus `kept`: generated tokens whose bytes lie wholly inside `kept`
    stay (with their KV cache); the rest are truncated, and the kept part of a cut token is appended as text."""
    kept_bytes = kept.encode("utf-8")
    whole = 0
    while whole < len(ends) and ends[whole] <= len(kept_bytes):
        whole += 1
    if whole < len(ends):
        seq.truncate(start + whole)
        tail = kept_bytes[ends[whole - 1] if whole else 0 :]
        if tail:
            seq.append(tail.decode("utf-8"))
    return kept


def no_repeat_ngram(n: int) -> Processor:
    """Forbid any token that would complete an n-gram already in the sequence (prompt included)."""

    def processor(seq: Sequence, candidates: list[Candidate]) -> list[Candidate]:
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
