"""Backend-neutral bookkeeping of one generation: token pieces in, certain text chunks and a finish reason out.

Every backend feeds each sampled token here, so stop handling, UTF-8 assembly, usage counting and finish
reasons behave identically everywhere. Counting rule (documented in the WIT): every sampled token counts as
generated, the end-of-generation token and the tokens that (partly) spelled a stop sequence included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmhost.domain.signatures import arguments_of
from llmhost.domain.types import FinishReason, StreamChunk, TokenLogprob, Usage
from llmhost.engine.text import StopMatcher, Utf8Assembler


@dataclass
class Step:
    """The outcome of one sampled token."""

    chunk: StreamChunk | None = None
    finish: FinishReason | None = None


@dataclass
class GenerationText:
    stops: tuple[str, ...]
    prompt_token_count: int
    max_tokens: int | None
    token_ids: list[int] = field(default_factory=list)
    # token_text_end[i]: length of the generated text once token i's bytes were decoded (for exact rewinds).
    token_text_end: list[int] = field(default_factory=list)
    # token_complete[i]: no character was left incomplete after token i (its bytes are all in the text).
    token_complete: list[bool] = field(default_factory=list)
    text_len: int = 0  # characters decoded so far (before stop cutting)
    released: list[str] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stopped_by_sequence: bool = False

    def __post_init__(self) -> None:
        self._utf8 = Utf8Assembler()
        self._stops = StopMatcher(self.stops)
        # Tokens taken since the last chunk, with their logprob entries. Only the first `_reportable` of them
        # go into the next chunk: those up to the last one that released text. A token whose text is still held
        # (part of a character, a possible stop) waits for the chunk that releases it, however the tokens are
        # grouped into chunks (one per token, or a burst's at once).
        self._unreported: list[tuple[int, TokenLogprob | None]] = []
        self._reportable = 0
        self._reportable_count = 0  # len(token_ids) when the last reportable token was taken

    @property
    def usage(self) -> Usage:
        return Usage(prompt_token_count=self.prompt_token_count, generated_token_count=len(self.token_ids))

    @property
    def text(self) -> str:
        return "".join(self.released)

    def take_token(
        self,
        token_id: int,
        piece: bytes,
        *,
        end_of_generation: bool,
        context_full: bool,
        logprob: TokenLogprob | None = None,
    ) -> tuple[str, FinishReason | None]:
        """`on_token` without building its chunk: the text the token released, and the finish reason if it ended
        the generation. `context_full`: no room for another token after this one. `logprob`: its entry when logprobs
        were requested (chunks then carry one per token id). The caller passes the text of one or more tokens to
        `release` (a scheduler reporting several tokens of a stream at once builds one chunk for them)."""
        if self.finish_reason is not None:
            raise RuntimeError("token after the generation finished")
        self.token_ids.append(token_id)
        if end_of_generation:
            # The end-of-generation token's own text (e.g. "<end_of_turn>") is never part of the output, nor is
            # its id part of a chunk's (whether it is reported alone or with the tokens before it).
            self.token_text_end.append(self.text_len)
            self.token_complete.append(not self._utf8.pending())
            return self._marked(self._finish_text(FinishReason.STOP))
        self._unreported.append((token_id, logprob))
        decoded = self._utf8.push(piece)
        self.text_len += len(decoded)
        self.token_text_end.append(self.text_len)
        self.token_complete.append(not self._utf8.pending())
        scan = self._stops.push(decoded)
        if scan.stopped:
            self.stopped_by_sequence = True
            return self._marked((scan.release, self._set_finish(FinishReason.STOP)))
        if self.max_tokens is not None and len(self.token_ids) >= self.max_tokens or context_full:
            chunk_text = scan.release
            tail = self._flush()
            return self._marked((chunk_text + tail, self._set_finish(self._limit_reason())))
        return self._marked((scan.release, None))

    @arguments_of(take_token)
    def on_token(self, *args: Any, **kwargs: Any) -> Step:
        """Account for one sampled token (`take_token`'s arguments), with the chunk of the text it released."""
        text, finish = self.take_token(*args, **kwargs)
        return Step(self.release(text), finish)

    def _marked(self, taken: tuple[str, FinishReason | None]) -> tuple[str, FinishReason | None]:
        """A token (or the finish) that released text makes every token taken so far reportable."""
        if taken[0]:
            self._reportable = len(self._unreported)
            self._reportable_count = len(self.token_ids)
        return taken

    def end(self, reason: FinishReason) -> Step:
        """The generation ended for a reason known outside the token stream (a remote server's finish reason
        without a token of its own): release held text and finish (`stop` wins if a stop sequence matched)."""
        if self.finish_reason is not None:
            return Step()
        return self._finish(reason)

    def end_of_language(self) -> Step:
        """The constraint admits no further token: the generation ends with `stop`, like end-of-generation."""
        if self.finish_reason is not None:
            return Step()
        return self._finish(FinishReason.STOP)

    def end_of_language_text(self) -> tuple[str, FinishReason | None]:
        """`end_of_language` without building its chunk (as `take_token`)."""
        if self.finish_reason is not None:
            return "", None
        return self._marked(self._finish_text(FinishReason.STOP))

    def _finish(self, reason: FinishReason) -> Step:
        text, finish = self._marked(self._finish_text(reason))
        return Step(self.release(text), finish)

    def _finish_text(self, reason: FinishReason) -> tuple[str, FinishReason]:
        tail = self._flush()
        if self.stopped_by_sequence:
            reason = FinishReason.STOP
        return tail, self._set_finish(reason)

    def _flush(self) -> str:
        """End of input: drop an incomplete last character and let the stop matcher decide on held text."""
        self._utf8.finish()
        scan = self._stops.finish()
        if scan.stopped:
            self.stopped_by_sequence = True
        return scan.release

    def _limit_reason(self) -> FinishReason:
        return FinishReason.STOP if self.stopped_by_sequence else FinishReason.LENGTH

    def _set_finish(self, reason: FinishReason) -> FinishReason:
        self.finish_reason = reason
        return reason

    def release(self, text: str) -> StreamChunk | None:
        """The chunk for `text` released by the tokens taken since the last chunk, or None when there is no text.
        It carries the ids of the tokens up to the last one that released text, and the usage as of that token:
        tokens after it (their text still held) wait for the chunk that has some, so a chunk's tokens spell its
        text whether the caller releases one token's text or several tokens' at once."""
        if not text:
            return None
        self.released.append(text)
        reported, self._unreported = self._unreported[: self._reportable], self._unreported[self._reportable :]
        self._reportable = 0
        usage = Usage(prompt_token_count=self.prompt_token_count, generated_token_count=self._reportable_count)
        return StreamChunk(
            text=text,
            token_ids=tuple(t for t, _ in reported),
            usage=usage,
            logprobs=tuple(e for _, e in reported if e is not None),
        )


def merge_chunks(chunks: Sequence[StreamChunk]) -> StreamChunk:
    """Consecutive chunks of one stream as one: their text and tokens in order, the last one's usage (a reader that
    comes back to a stream after several tokens gets all the text that is ready at once)."""
    if len(chunks) == 1:
        return chunks[0]
    return StreamChunk(
        text="".join(c.text for c in chunks),
        token_ids=tuple(t for c in chunks for t in c.token_ids),
        usage=chunks[-1].usage,
        logprobs=tuple(entry for c in chunks for entry in c.logprobs),
    )
