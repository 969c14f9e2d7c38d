"""Planning one decode step: which rows go into the batch. Pure, over plain data (unit- and property-tested).

Decode rows first (one token each, for every generation whose reader is not too far behind), then prompt chunks
of generations still in prefill, in arrival order, within the batch size: a long prompt never stalls the others,
and what does not fit runs in the next step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pending:
    """One active generation: `pending` tokens not yet in the KV cache (1: it is decoding), and whether its
    reader lags so far behind that it is skipped this step."""

    key: int
    pending: int
    stalled: bool = False


@dataclass(frozen=True)
class Planned:
    """`count` of the generation's pending tokens go into this step; `samples`: they are all of them, so the
    step ends with its next token sampled."""

    key: int
    count: int
    samples: bool


def plan_step(jobs: Sequence[Pending], budget: int) -> list[Planned]:
    ready = [job for job in jobs if not job.stalled and job.pending > 0]
    decoding = [job for job in ready if job.pending == 1]
    prefilling = [job for job in ready if job.pending > 1]
    planned: list[Planned] = []
    for job in (*decoding, *prefilling):
        if budget <= 0:
            break
        count = min(job.pending, budget)
        budget -= count
        planned.append(Planned(job.key, count, count == job.pending))
    return planned
