"""`Sequence`: a WIT `sequences.sequence` that feels like a string (Outlines-style continuous generation).

The host keeps the sequence's model state (KV cache), so each step pays only for its new tokens:

    seq = Sequence("gemma-3-270m", "A list of fruits:\\n1.")
    name = seq.generate(max_tokens=8, stop="\\n", temperature=0.0)
    seq += f" ({len(name)} letters)\\n2."
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from typing import Any

from .errors import InvalidInput, call
from .llm import Stream, _Owned
from .params import DEFAULT_MODEL, Completion, TokenLogprob, build
from .processors import GeneratedText, Processor, choose

_BOS: dict[str, list[int]] = {}  # per model: the tokens `tokenize("")` gives (the beginning of sequence)


def _wit_sequences() -> Any:
    from wit_world.imports import sequences

    return sequences


def _bos(model: str) -> list[int]:
    if model not in _BOS:
        from .llm import tokenize

        _BOS[model] = tokenize("", model)
    return _BOS[model]


class Sequence(_Owned):
    """A token sequence of one model. `str(seq)` is its text; `len(seq)` counts characters, `seq.token_count`
    tokens. `seq += "text"` or `seq += other_sequence` appends; `seq[:n]` is a new sequence of the first `n`
    characters; `seq.generate(...)` appends a generation and returns its text."""

    def __init__(self, model: str = DEFAULT_MODEL, text: str = "", *, _handle: Any = None) -> None:
        self.model = model
        self._handle: Any = _handle if _handle is not None else call(_wit_sequences().Sequence.open, model)
        # Logprobs of tokens taken over from another sequence by `+=` (the host keeps none for appended tokens).
        self._inherited: dict[int, float] = {}
        self._text: str | None = None  # cached: reading the text is a host call
        self._prefix_len: dict[int, int] = {}  # token count → length of the text of that many tokens
        self._ids: list[int] | None = None  # cached: kept up to date by `generate_with`'s own appends
        if text:
            self.append(text)

    @classmethod
    def _wrap(cls, model: str, handle: Any, inherited: dict[int, float] | None = None) -> Sequence:
        seq = cls(model, _handle=handle)
        seq._inherited = dict(inherited or {})
        return seq

    def _changed(self) -> None:
        self._text = None
        self._prefix_len.clear()
        self._ids = None

    @property
    def _live(self) -> Any:
        if self._handle is None:
            raise InvalidInput("the sequence was closed")
        return self._handle

    # --- reading -------------------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """WIT `sequence.text`."""
        if self._text is None:
            self._text = str(self._live.text())
        return self._text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Sequence({self.model!r}, {self.text!r})"

    def __len__(self) -> int:
        return len(self.text)

    def __contains__(self, item: str) -> bool:
        return item in self.text

    @property
    def token_count(self) -> int:
        """WIT `sequence.len`."""
        return int(self._live.len())

    @property
    def token_ids(self) -> list[int]:
        """WIT `sequence.token-ids`."""
        if self._ids is None:
            self._ids = list(self._live.token_ids())
        return list(self._ids)

    @property
    def logprobs(self) -> list[float | None]:
        """WIT `sequence.logprobs`, plus the logprobs of tokens taken over from other sequences by `+=`."""
        values: list[float | None] = list(self._live.logprobs())
        for index, logprob in self._inherited.items():
            if index < len(values) and values[index] is None:
                values[index] = logprob
        return values

    @property
    def log_likelihood(self) -> float:
        """WIT `sequence.log-likelihood` (the sum of `logprobs`)."""
        if not self._inherited:
            return float(self._live.log_likelihood())
        return math.fsum(lp for lp in self.logprobs if lp is not None)

    @property
    def evaluated_token_count(self) -> int:
        """WIT `sequence.evaluated-token-count`."""
        return int(self._live.evaluated_token_count())

    # --- changing ------------------------------------------------------------------------------------------
    def append(self, text: str) -> Sequence:
        """WIT `sequence.append`."""
        if text:
            call(self._live.append, text)
            self._changed()
        return self

    def append_tokens(self, tokens: Iterable[int]) -> Sequence:
        """WIT `sequence.append-tokens`."""
        ids = list(tokens)
        if ids:
            call(self._live.append_tokens, ids)
            self._changed()
        return self

    def append_tokens_with_logprobs(self, tokens: Iterable[int], top: int = 0) -> list[TokenLogprob | None]:
        """WIT `sequence.append-tokens-with-logprobs` (0.2.2): append the ids and get each one's log-probability
        after the tokens before it, with its position's `top` (0 to 20) best tokens; `None` for the first token of
        an empty sequence. One decode per batch of tokens, not one per token."""
        ids = list(tokens)
        if not ids:
            return []
        entries = call(self._live.append_tokens_with_logprobs, ids, top)
        self._changed()
        return [None if e is None else TokenLogprob.from_wit(e) for e in entries]

    def _append_generated(self, token: int) -> None:
        """Append one sampled token, keeping the cached ids (a processor reading them pays no host call)."""
        ids = self._ids
        call(self._live.append_tokens, [token])
        self._changed()
        if ids is not None:
            self._ids = [*ids, token]

    def extend(self, other: Sequence) -> Sequence:
        """Append `other`'s tokens as they are (its beginning-of-sequence token dropped when this one is not
        empty), keeping their logprobs; only the new tokens are evaluated."""
        ids = other.token_ids
        logprobs = other.logprobs
        start = self.token_count
        bos = _bos(self.model) if start else []
        if bos and ids[: len(bos)] == bos:
            ids, logprobs = ids[len(bos) :], logprobs[len(bos) :]
        self.append_tokens(ids)
        self._inherited.update({start + i: lp for i, lp in enumerate(logprobs) if lp is not None})
        return self

    def __iadd__(self, other: str | Sequence) -> Sequence:
        return self.extend(other) if isinstance(other, Sequence) else self.append(other)

    def __add__(self, other: str | Sequence) -> Sequence:
        result = self.fork()
        result += other
        return result

    def __radd__(self, other: str) -> Sequence:
        result = Sequence(self.model, other)
        result += self
        return result

    def truncate(self, token_count: int) -> Sequence:
        """WIT `sequence.truncate`: keep the first `token_count` tokens (and their KV cache)."""
        call(self._live.truncate, token_count)
        self._inherited = {i: lp for i, lp in self._inherited.items() if i < token_count}
        self._changed()
        return self

    def fork(self) -> Sequence:
        """WIT `sequence.fork`: an independent copy sharing this one's KV cache."""
        return Sequence._wrap(self.model, call(self._live.fork), self._inherited)

    # --- slicing -------------------------------------------------------------------------------------------
    def __getitem__(self, key: int | slice) -> Any:
        """`seq[i]` is a character; `seq[:n]` a new sequence of the first `n` characters that keeps the KV cache
        of the longest token prefix inside them (the rest is appended as text); other slices are new sequences
        of the sliced text."""
        text = self.text
        if isinstance(key, int):
            return text[key]
        start, stop, step = key.indices(len(text))
        if step == 1 and start == 0:
            return self.prefix(stop)
        return Sequence(self.model, text[key])

    def _length_of(self, token_count: int) -> int:
        """The length of the text of the first `token_count` tokens (read from a truncated fork, then cached)."""
        if token_count not in self._prefix_len:
            probe = call(self._live.fork)
            try:
                call(probe.truncate, token_count)
                self._prefix_len[token_count] = len(probe.text())
            finally:
                probe.__exit__(None, None, None)
        return self._prefix_len[token_count]

    def prefix(self, n: int) -> Sequence:
        """The first `n` characters as a new sequence: the longest token prefix whose text fits in them keeps its
        model state (a fork truncated to it), and the characters after it are appended as text."""
        text = self.text
        n = max(0, min(n, len(text)))
        if n == len(text):
            return self.fork()
        # The texts of token prefixes grow with their length: binary search the longest that fits in n.
        low, high = 0, self.token_count
        while low < high:
            mid = (low + high + 1) // 2
            if self._length_of(mid) <= n:
                low = mid
            else:
                high = mid - 1
        kept = low
        result = self.fork()
        result.truncate(kept)
        result.append(text[self._length_of(kept) if kept else 0 : n])
        return result

    # --- generating ----------------------------------------------------------------------------------------
    def generate(self, **params: Any) -> Completion:
        """WIT `sequence.generate`: generate from the current state and append the returned text, which is
        returned (a `str` with `.finish_reason`, `.usage`, `.logprobs`). Keywords as in `llm.infer`."""
        try:
            return Completion.from_wit(call(self._live.generate, build(params, self.model)))
        finally:
            self._changed()

    def stream(self, **params: Any) -> Stream:
        """WIT `sequence.generate-stream`: the chunks read before the stream ends or is closed are appended."""
        self._changed()
        return _SequenceStream(self, call(self._live.generate_stream, build(params, self.model)))

    def score(self, continuations: Iterable[str]) -> list[float]:
        """WIT `sequence.score`: the log-likelihood of each continuation given the sequence (left unchanged)."""
        return [float(x) for x in call(self._live.score, list(continuations))]

    def next_token_logprobs(self, top: int = 20) -> list[tuple[int, float, bytes]]:
        """WIT `sequence.next-token-logprobs`: the `top` (1 to 256) most likely next tokens as
        `(token_id, logprob, piece_bytes)`, best first, under the model's raw distribution. The sequence is left
        unchanged; pending tokens are decoded in the host's shared batch."""
        return [(int(c.token_id), float(c.logprob), bytes(c.bytes)) for c in call(self._live.next_token_logprobs, top)]

    def generate_with(
        self,
        processors: Iterable[Processor],
        *,
        max_tokens: int,
        top: int = 64,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: str | Iterable[str] = (),
    ) -> str:
        """Generate with logits processors that run here, in the guest: each step reads the `top` candidates,
        passes them through every processor in turn (`(seq, candidates) -> candidates`), samples from what is
        left with a `seed`ed RNG (softmax of logprob / `temperature`; 0: the most likely), and appends the token.
        Ends after `max_tokens`, at a token with no bytes (end of generation), when the processors leave no
        candidate, or at a stop sequence. Returns the generated text; stops are exact, as in `generate`: the
        text excludes the stop, and the sequence holds exactly prompt + text. See `llmhost_guest.processors`."""
        procs = list(processors)
        rng = random.Random(seed)
        start = self.token_count
        generated = GeneratedText(stop)
        for _ in range(max_tokens):
            candidates = self.next_token_logprobs(top)
            for processor in procs:
                candidates = list(processor(self, candidates))
            if not candidates:
                break  # the processors allow nothing: end as the language would
            token, _, piece = choose(candidates, temperature, rng)
            if not piece:
                break  # end of generation (a control token is never appended)
            self._append_generated(token)
            if generated.feed(piece):
                break
        keep, tail = generated.settle()
        if keep < len(generated.ends):
            self.truncate(start + keep)
            self.append(tail)
        return generated.text

    def select(self, choices: Iterable[str]) -> str:
        """Append the most likely of `choices` (by `score`; the first of equals) and return it."""
        options = list(choices)
        if not options:
            raise InvalidInput("select needs at least one choice")
        scores = self.score(options)
        best = options[max(range(len(options)), key=lambda i: (scores[i], -i))]
        self.append(best)
        return best

    def beam_search(
        self, width: int = 4, max_tokens: int = 32, *, stop: str | Iterable[str] = (), length_penalty: float = 0.0
    ) -> list[tuple[Sequence, float]]:
        """WIT `sequence.beam-search`: up to `width` new sequences (prompt + generated text), best first, with
        their scores (joint log-likelihood of the generated tokens ÷ tokens**length_penalty). This sequence is
        left unchanged."""
        sequences = _wit_sequences()
        params = sequences.BeamParams(
            width=int(width),
            max_tokens=int(max_tokens),
            stop=[stop] if isinstance(stop, str) else list(stop),
            length_penalty=float(length_penalty),
        )
        beams = call(self._live.beam_search, params)
        return [(Sequence._wrap(self.model, beam.sequence, self._inherited), float(beam.score)) for beam in beams]


class _SequenceStream(Stream):
    def __init__(self, owner: Sequence, handle: Any) -> None:
        super().__init__(handle)
        self._owner = owner

    def close(self) -> None:
        super().close()
        self._owner._changed()
