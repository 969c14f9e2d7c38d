"""Applying a constraint at each decode step: the per-generation protocol, and the worker that computes the
masks of one step's constrained rows while the batch decodes.

Computing a token mask over Gemma 3's 262k-token vocabulary takes a fraction of a millisecond to a few
milliseconds; llguidance and llama_decode both release the GIL, so running the masks on their own thread
beside the decode hides that time instead of adding it to every step of every row in the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol


class TokenConstraint(Protocol):
    """One generation's constraint state (see engine/constraints.py for the llguidance implementation)."""

    def compute_mask(self) -> Any:
        """The mask of tokens allowed next (runs on the mask thread, never at once with `advance`)."""
        ...

    def apply(self, logits: Any, mask: Any) -> bool:
        """Set the logits of disallowed tokens to -inf in place; False when no token is allowed at all."""
        ...

    def advance(self, token: int) -> bool:
        """Consume a sampled token; returns True when the language admits no further token."""
        ...


class _Pending:
    def __init__(self, future: Future[dict[int, Any]] | None) -> None:
        self._future = future

    def wait(self) -> dict[int, Any]:
        """Masks by `id(constraint)`; re-raises what the computation raised."""
        return {} if self._future is None else self._future.result()


class MaskWorker:
    """One thread computing the masks of a step's constrained rows while the step decodes."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def start(self, constraints: Sequence[TokenConstraint | None]) -> _Pending:
        todo = [c for c in constraints if c is not None]
        if not todo:
            return _Pending(None)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmhost-masks")
            pool = self._pool
        return _Pending(pool.submit(lambda: {id(c): c.compute_mask() for c in todo}))

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
