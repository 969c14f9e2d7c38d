"""Planning one decode step: which rows go into the batch. Pure, over plain data (unit- and property-tested).

Decode rows first (one token each, for every generation whose reader is not too far behind), then prompt chunks
of generations still in prefill, in arrival order, within the batch size: a long prompt never stalls the others,
and what does not fit runs in the next step.

Deterministic mode (`chunk` set) adds three rules, so a token's KV state and logits never depend on what else
runs (llama.cpp's kernels round by the shape of the micro-batch a row falls in):
- a prompt row ends at the next multiple of `chunk` positions (or the prompt's end), never anywhere the budget
  happens to cut it: the same prompt is cut the same way whatever it is batched with;
- every multi-token row is decoded in a call of its own (`decode_calls`), so its matrix products have the same
  shape whatever else runs; one-token rows share calls of at most the decoder's `invariant_rows`;
- a cached prefix is reused only up to a multiple of `chunk` that its holder evaluated as whole chunks
  (`reusable_prefix`, `aligned_after`): the rest of the prompt is then cut exactly as on its first run;
- an append evaluates at once only the rows before the last one (`eager_target`), so a sequence's rows are the
  same whether its append found a slot free or its next generation evaluated everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Multi-step decoding (a "burst", after vLLM's multi-step scheduling): while every generation that can take a row
# is decoding one token a step, the thread that ran a step runs the next one at once, with no hand-over to another
# thread, no readers woken and no planning in between: what a step costs the host besides its own tokens is paid
# once per burst. Readers get the burst's text when it ends (each as one chunk: `merge_chunks`), so a stream's
# chunks come at least every `BURST_S` (or `BURST_STEPS` steps: 16-48 ms at GPU speed). New work never waits for a
# burst: the burst ends after the step under way (model_lock.ModelLock.contended, the admission queue).
BURST_STEPS = 16
BURST_S = 0.15


@dataclass(frozen=True)
class Pending:
    """One active generation: `pending` tokens not yet in the KV cache (1: it is decoding), starting at position
    `start`, and whether its reader lags so far behind that it is skipped this step. For bursts: `fresh`, its
    first token was taken by the last step (its reader gets that at once); `reads_logits`, it reads its rows itself
    and ends after one (a guest's next-token read: its loop comes back with the next one)."""

    key: int
    pending: int
    stalled: bool = False
    start: int = 0
    fresh: bool = False
    reads_logits: bool = False


def plan_burst(jobs: Sequence[Pending], budget: int, waiting: bool) -> list[int] | None:
    """The keys of the generations a burst starting now decodes; None when the step must not start one (it is
    planned by `plan_step`): work is `waiting` for the model (the caller admitted what it could first), some
    generation is in prefill, fresh or reads its own logits, or the rows would not fit the budget. Stalled
    generations take no row, as in `plan_step`."""
    if waiting:
        return None
    keys: list[int] = []
    for job in jobs:
        if job.stalled or job.pending <= 0:
            continue
        if job.pending != 1 or job.fresh or job.reads_logits:
            return None
        keys.append(job.key)
    return keys if 0 < len(keys) <= budget else None


def burst_continues(steps: int, elapsed_s: float, waiting: bool, read_whole: bool = False) -> bool:
    """Whether a burst that ran `steps` steps in `elapsed_s` takes another (for the generations still in it).
    `read_whole`: its only generation is read whole by the thread running it (`infer`): no reader waits for its
    chunks, so only new work ends the burst."""
    return not waiting and (read_whole or (steps < BURST_STEPS and elapsed_s < BURST_S))


@dataclass(frozen=True)
class Planned:
    """`count` of the generation's pending tokens go into this step; `samples`: they are all of them, so the
    step ends with its next token sampled."""

    key: int
    count: int
    samples: bool


def row_length(start: int, pending: int, budget: int, chunk: int | None) -> int:
    """How many of `pending` tokens from position `start` one row evaluates: what the budget allows, or in
    deterministic mode up to the next multiple of `chunk` (0 when the budget cannot hold that whole row)."""
    if chunk is None:
        return min(pending, budget)
    count = min(pending, chunk - start % chunk)
    return count if count <= budget else 0


def plan_step(jobs: Sequence[Pending], budget: int, chunk: int | None = None) -> list[Planned]:
    ready = [job for job in jobs if not job.stalled and job.pending > 0]
    planned: list[Planned] = []
    for job in ready:
        if job.pending == 1 and budget > 0:
            planned.append(Planned(job.key, 1, True))
            budget -= 1
    first = True
    for job in ready:
        if job.pending == 1:
            continue
        # Deterministic prompt rows are decoded in calls of their own: the first always runs, so decode rows
        # filling the budget never starve prompts.
        room = max(budget, chunk) if chunk is not None and first else budget
        count = row_length(job.start, job.pending, room, chunk)
        if count <= 0:
            if chunk is None:
                break
            continue
        budget -= count
        first = False
        planned.append(Planned(job.key, count, count == job.pending))
    return planned


def decode_calls(rows: Sequence[tuple[int, int]], group: int | None) -> list[list[int]]:
    """The llama_decode calls for a step's rows, given as (slot, token count) in order, as lists of row indices:
    one call for all, or (deterministic mode) each multi-token row in a call of its own and the one-token rows in
    calls of at most `group` rows, as even as can be, by ascending slot. `group` is the decoder's
    `invariant_rows`: up to that many tokens in a call, its kernels compute each row as they would alone.

    By slot, because with a KV stream per slot llama.cpp puts only consecutive slots (in batch order) in one
    micro-batch: rows in any other order cost a graph computation each."""
    if group is None:
        return [list(range(len(rows)))] if rows else []
    singles = sorted((i for i, (_, count) in enumerate(rows) if count == 1), key=lambda i: rows[i][0])
    calls = -(-len(singles) // group)  # ceiling
    grouped = [singles[k * len(singles) // calls : (k + 1) * len(singles) // calls] for k in range(calls)]
    return grouped + [[i] for i, (_, count) in enumerate(rows) if count > 1]


def aligned_after(aligned: int, start: int, count: int, chunk: int) -> int:
    """A sequence's whole-chunk prefix after evaluating `count` tokens from position `start`: the positions
    [0, aligned) were each evaluated in a row of exactly `chunk` tokens starting at a multiple of `chunk`, which
    is how a longer prompt's first run evaluates them. Rewriting a position below it shortens it."""
    if start < aligned:
        aligned = start - start % chunk
    if start == aligned and count == chunk:
        return start + count
    return aligned


def eager_target(length: int, chunk: int | None) -> int:
    """How much of a sequence of `length` tokens an append evaluates at once: all but the last token (the next
    generation evaluates that one, for its logits); in deterministic mode only up to where the last row of a
    fresh evaluation would start, so the next generation's last row has the same shape whether the append found a
    slot free or not (then the generation evaluates it all)."""
    if chunk is None:
        return length - 1
    return (length - 1) - (length - 1) % chunk


def reusable_prefix(common: int, aligned: int, prompt_length: int, chunk: int | None) -> int:
    """How much of a holder's cached prefix a new prompt may reuse: the common prefix, short of the prompt's last
    token (evaluated for its logits); in deterministic mode only whole chunks the holder evaluated as such."""
    length = min(common, prompt_length - 1)
    if chunk is None:
        return max(length, 0)
    length = min(length, aligned)
    return max(length - length % chunk, 0)
