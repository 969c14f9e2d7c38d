"""Scoring continuations and beam search on an `EngineModel`: several forks of one sequence decoded in one batch.

Both work on temporary forks (`seq_cp` in the unified KV cache: the shared prefix is stored once) and leave the
source sequence's tokens unchanged. The model lock is taken per decode step, never for a whole search, so the
scheduler's generations keep running between steps. Log-probabilities come from the raw distribution (no
penalties, no bias), computed exactly as `LlamaModel.sample_row` computes a generated token's logprob, so a score
equals the sum of the logprobs the same tokens would get when generated.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.types import BeamParams, TokenLogprob, TopLogprob, check_continuations
from llmhost.engine.base import UNBOUNDED, Bounds
from llmhost.engine.generation import GenerationText
from llmhost.engine.local.planning import row_length
from llmhost.engine.local.sequence_state import SeqState, plan_rewind

if TYPE_CHECKING:
    from llmhost.engine.local.model import EngineModel as LlamaModel


# Logits within this many nats of the row's best hold its top tokens in practice (thousands of ids); the exact
# fallback covers the rest.
_TOP_MARGIN = 12.0


class _Row:
    """The raw log-probabilities of one output row, read lazily: its logits (float32, as the decoder keeps them)
    and their log-sum-exp. A token's logprob is `logits[t] - lse` in float64, exactly as `sample_row` computes a
    generated token's, so a score equals the sum of the logprobs the same tokens get when generated."""

    def __init__(self, model: LlamaModel, row: int) -> None:
        import numpy as np

        self.logits = model.decoder.logits(row)
        peak = float(self.logits.max())
        self.peak = peak
        self.lse = peak + float(np.log(np.exp(self.logits - peak).sum()))

    def logprob(self, token: int) -> float:
        return float(self.logits[token]) - self.lse

    def best(self, count: int) -> list[int]:
        """The `count` most likely tokens, best first (ties: the lower id first). Only tokens within a margin of
        the best are ranked (a full partition of a 262k vocabulary costs ~2 ms a row); when fewer than `count`
        lie there, the whole row is."""
        import numpy as np

        logits = self.logits
        ids = np.flatnonzero(logits >= self.peak - _TOP_MARGIN)
        if len(ids) < count:
            ids = np.arange(len(logits))
        values = logits[ids]
        if len(ids) > count:
            kth = np.partition(values, len(values) - count)[len(values) - count]
            keep = values >= kth  # ties at the boundary kept, then ordered by id below
            ids, values = ids[keep], values[keep]
        order = np.lexsort((ids, -values))[:count]
        return [int(t) for t in ids[order]]


def _entry(model: LlamaModel, row: _Row, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability in `row`, with the row's `top` best tokens (as a generated token's entry)."""
    best = (
        tuple(TopLogprob(token_id=t, bytes=model.piece(t), logprob=row.logprob(t)) for t in row.best(top))
        if top
        else ()
    )
    return TokenLogprob(token_id=token, bytes=model.piece(token), logprob=row.logprob(token), top=best)


def append_with_logprobs(
    model: LlamaModel, state: SeqState, tokens: list[int], texts: list[str], top: int, bounds: Bounds = UNBOUNDED
) -> list[TokenLogprob | None]:
    """Append `tokens` (with their `texts`) to `state`, and give each its log-probability after the tokens before
    it, with the `top` best alternatives: `None` for the first token of an empty sequence. The first new token is
    scored from the row of the sequence's last token; the others from the rows of the new tokens before them, in
    batch-size chunks with a logits row at every position (one decode per chunk, the lock released in between).
    The last new token stays pending, as after `append`. Counted into the run's budget before any work."""
    bounds.spend(len(tokens))
    scored: list[TokenLogprob | None] = []
    try:
        with model.lock:
            model.attach(state, "score", bounds.check)
            state.busy = True  # not swapped out between chunks
            if state.tokens:
                model.unevaluate_last(state)
                model.evaluate(state, len(state.tokens))
                scored.append(_entry(model, _Row(model, -1), tokens[0], top))
            else:
                scored.append(None)
            state.append(tokens, texts)
        while state.n_kv < len(state.tokens) - 1:
            bounds.check()  # a cancelled run stops between decode steps
            with model.lock:
                start = state.n_kv
                count = row_length(start, len(state.tokens) - 1 - start, model.n_batch, model.chunk)
                chunk = state.tokens[start : start + count]
                if model._decode([(state, chunk)], set(range(count))) != 0:
                    raise EngineError(f"no room in the KV cache of {model.name} for {count} tokens")
                state.n_kv += count
                _count(model, [state], count)
                scored += [_entry(model, _Row(model, j), state.tokens[start + j + 1], top) for j in range(count)]
    finally:
        model.slots.release(state)
    return scored


def _fork(model: LlamaModel, source: SeqState, kind: str, bounds: Bounds) -> SeqState:
    """A busy copy of `source` (attached, busy) sharing its KV cells. Lock held. Unlike `SlotPool.fork` it leaves
    `source` busy, so attaching further copies cannot swap the source out between forks."""
    clone = SeqState(list(source.tokens), list(source.token_texts), list(source.logprobs))
    clone.busy = True
    model.attach(clone, kind, bounds.check)
    assert source.slot is not None and clone.slot is not None
    model.decoder.seq_cp(source.slot, clone.slot, -1)
    clone.n_kv = source.n_kv
    return clone


def _count(model: LlamaModel, states: Iterable[SeqState], tokens: int) -> None:
    for state in states:
        state.evaluated += tokens
    model.evaluated_tokens += tokens


def score(model: LlamaModel, source: SeqState, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
    """The log-likelihood of each continuation given `source` (tokenized as `append` tokenizes a non-empty
    sequence's text). The first token of every continuation is scored from one shared row (the source's last
    token); the rest of every continuation in as few batches as slots and the batch size allow, one fork each.
    Bounded as a generation is: every continuation token is counted into the run's budget before any work, and
    a cancelled run (deadline, disconnect) stops it within one decode step."""
    check_continuations(continuations)
    if not source.tokens:
        raise InvalidInput("the sequence is empty: append a prompt before scoring continuations")
    room = model.n_ctx - len(source.tokens)
    tokenized = [
        model.tokenize(text, add_special=False, room=room, what=f"continuations[{i}]") if text else []
        for i, text in enumerate(continuations)
    ]
    for i, tokens in enumerate(tokenized):
        if len(source.tokens) + len(tokens) > model.n_ctx:
            raise InvalidInput(
                f"continuations[{i}] is {len(tokens)} tokens: with the sequence's {len(source.tokens)} that exceeds "
                f"the context window of {model.n_ctx} tokens"
            )
    scores = [0.0] * len(tokenized)
    if not any(tokenized):
        return scores
    bounds.spend(sum(len(tokens) for tokens in tokenized))
    with model.lock:
        model.attach(source, "score", bounds.check)
        # Run the last token now (again, if it was in the cache: its logits are gone): its row scores every first token.
        model.unevaluate_last(source)
        model.evaluate(source, len(source.tokens))
        first = _Row(model, -1)
        for i, tokens in enumerate(tokenized):
            if tokens:
                scores[i] = first.logprob(tokens[0])
    pending = [i for i, tokens in enumerate(tokenized) if len(tokens) > 1]
    while pending:
        group = _score_group(model, source, tokenized, pending, scores, bounds)
        pending = pending[group:]
    return scores


def _score_group(
    model: LlamaModel,
    source: SeqState,
    tokenized: list[list[int]],
    pending: list[int],
    scores: list[float],
    bounds: Bounds,
) -> int:
    """Score the rest of the first continuations of `pending` that fit at once (a fork each, while slots are free
    without evicting anyone, leaving one free for other work, at least one); returns how many it took."""
    forks: list[tuple[int, SeqState]] = []
    try:
        with model.lock:
            source.busy = True  # not swapped out while it is forked
            try:
                model.attach(source, "score", bounds.check)
                room = max(1, model.slots.available - 1)
                for i in pending[:room]:
                    clone = _fork(model, source, "score", bounds)
                    # Its tokens but the last (whose logprob comes from the row before it) run through the model.
                    clone.append(tokenized[i][:-1], [""] * (len(tokenized[i]) - 1))
                    forks.append((i, clone))
            finally:
                source.busy = False
        base = len(source.tokens)
        while True:
            bounds.check()  # a cancelled run stops between decode steps
            with model.lock:  # one decode per turn of the lock: generations of others run in between
                plan: list[tuple[SeqState, list[int]]] = []
                rows: list[tuple[int, int, int]] = []  # (continuation, its token index predicted, batch row)
                budget = model.n_batch
                for i, clone in forks:
                    chunk = clone.tokens[clone.n_kv : clone.n_kv + budget]
                    if not chunk:
                        continue
                    start = sum(len(c) for _, c in plan)
                    rows.extend((i, clone.n_kv - base + 1 + j, start + j) for j in range(len(chunk)))
                    plan.append((clone, chunk))
                    budget -= len(chunk)
                    if budget <= 0:
                        break
                if not plan:
                    break
                model._decode(plan, {row for _, _, row in rows})
                for clone, chunk in plan:
                    clone.n_kv += len(chunk)
                _count(model, [source], sum(len(c) for _, c in plan))
                for i, index, row in rows:
                    scores[i] += _Row(model, row).logprob(tokenized[i][index])
        return len(forks)
    finally:
        with model.lock:
            for _, clone in forks:
                model.slots.detach(clone)


@dataclass(eq=False)  # compared by identity
class _Beam:
    state: SeqState
    text: GenerationText
    total: float = 0.0  # the sum of the logprobs of its generated tokens
    eog: bool = False


def beam_search(
    model: LlamaModel, source: SeqState, params: BeamParams, bounds: Bounds = UNBOUNDED
) -> list[tuple[SeqState, float]]:
    """Beam search from `source`: every step decodes the live beams in one batch, extends each by its `width`
    best tokens and keeps the best `width` candidates overall. A candidate that finishes (end-of-generation, a
    stop sequence, `max_tokens`, a full window) leaves the search; it ends when `width` beams have finished or
    none is live. Returns new sequences (rewound to their returned text, as a generation's), best first."""
    width = params.width
    if width > model.slots.count:
        raise InvalidInput(
            f"beam width {width} needs {width} sequence slots at once; {model.name} has {model.slots.count} "
            f"(raise `models.{model.name}.slots` in the config)"
        )
    if not source.tokens:
        raise InvalidInput("the sequence is empty: append a prompt before beam search")
    base = len(source.tokens)
    live: list[_Beam] = []
    finished: list[_Beam] = []
    try:
        with model.lock:
            source.busy = True
            try:
                model.attach(source, "beam-search", bounds.check)
                model.evaluate(source, base - 1)  # at most its last token is left for the first step
                model.unevaluate_last(source)
                start = _fork(model, source, "beam-search", bounds)
            finally:
                source.busy = False
            start.busy = False
        live.append(_Beam(start, GenerationText(params.stop, base, params.max_tokens)))
        if base >= model.n_ctx:  # a full window: nothing can be generated
            return [(start, 0.0)]
        while live and len(finished) < width:
            bounds.spend(len(live))  # each live beam's next token is evaluated; a cancelled run stops here
            live = _beam_step(model, live, finished, width - len(finished), bounds)
    except BaseException:
        with model.lock:
            for beam in [*live, *finished]:
                model.slots.detach(beam.state)
        raise
    with model.lock:
        for beam in finished:
            _rewind(model, beam, base)
    ranked = sorted(finished, key=lambda b: -_penalised(b, params.length_penalty))
    return [(beam.state, _penalised(beam, params.length_penalty)) for beam in ranked]


def _penalised(beam: _Beam, length_penalty: float) -> float:
    count = len(beam.text.token_ids)
    return beam.total / count**length_penalty if length_penalty and count else beam.total


def _beam_step(model: LlamaModel, live: list[_Beam], finished: list[_Beam], keep: int, bounds: Bounds) -> list[_Beam]:
    """One decode of every live beam (one batch, lock held for this step only); returns the new live beams."""
    with model.lock:
        for beam in live:
            beam.state.busy = True  # none of the batch is swapped out while the others attach
        children: list[_Beam] = []
        forks: list[SeqState] = []
        try:
            for beam in live:
                model.attach(beam.state, "beam-search", bounds.check)
            plan = [(beam.state, beam.state.tokens[beam.state.n_kv :]) for beam in live]
            rows: list[int] = []
            index = 0
            for _, tokens in plan:
                index += len(tokens)
                rows.append(index - 1)
            model._decode(plan, set(rows))
            for state, tokens in plan:
                state.n_kv += len(tokens)
                _count(model, [state], len(tokens))
            candidates: list[tuple[float, int, int, float]] = []  # (joint logprob, beam, token, token logprob)
            for b, (beam, row) in enumerate(zip(live, rows, strict=True)):
                scored = _Row(model, row)
                for t in scored.best(keep):
                    logprob = scored.logprob(t)
                    candidates.append((beam.total + logprob, b, t, logprob))
            # Ties go to the earlier beam and the lower token id, so a search is deterministic.
            chosen = sorted(candidates, key=lambda c: (-c[0], c[1], c[2]))[:keep]
            picks: dict[int, list[tuple[float, int, int, float]]] = {}
            for candidate in chosen:
                picks.setdefault(candidate[1], []).append(candidate)
            for b, beam in enumerate(live):  # beams no candidate came from end here, freeing slots for forks
                if b not in picks:
                    model.slots.detach(beam.state)
            # Forks first (a fork copies its parent's state as it is), then every child takes its token.
            for b, beam_picks in picks.items():
                parent = live[b]
                for _ in beam_picks[1:]:
                    forks.append(_fork(model, parent.state, "beam-search", bounds))
            kids = iter(forks)
            for b, beam_picks in picks.items():
                parent = live[b]
                texts = [parent.text] + [copy.deepcopy(parent.text) for _ in beam_picks[1:]]
                for n, ((joint, _, token, logprob), text) in enumerate(zip(beam_picks, texts, strict=True)):
                    state = parent.state if n == 0 else next(kids)
                    state.append([token], [""], [logprob])
                    eog = model.is_eog(token)
                    step = text.on_token(
                        token, model.piece(token), end_of_generation=eog, context_full=len(state.tokens) >= model.n_ctx
                    )
                    children.append(_Beam(state, text, joint, eog))
                    if step.finish is not None:
                        finished.append(children[-1])
            return [child for child in children if child not in finished]
        except BaseException:
            for state in forks:
                model.slots.detach(state)
            raise
        finally:
            for beam in [*live, *children]:
                beam.state.busy = False


def _rewind(model: LlamaModel, beam: _Beam, base: int) -> None:
    """Make a finished beam's state exactly its returned text (as a generation's rewind does). Lock held."""
    state = beam.state
    plan = plan_rewind(beam.text, beam.eog)
    kept = base + plan.keep
    model.slots.trim(state, kept)
    state.token_texts[base:kept] = plan.kept_texts
    if plan.remainder:
        tokens = model.tokenize(plan.remainder, add_special=False)
        state.append(tokens, model.texts_of(tokens, plan.remainder))
