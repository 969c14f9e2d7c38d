"""What a model reports for monitoring (`llmhost serve`'s metrics), as a tiny observer protocol: the engine never
imports a metrics library, and a host without metrics pays one no-op call per event (never one per token).

Events are reported where they happen (an admission, a first token, a generation's or an embeddings call's end).
What is cheaper to read than to report (slots in use, the queue's length, decode steps and rows) the model keeps as
plain numbers and hands over as `read()`, which the metrics call when scraped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelGauges:
    """One model's state now, read at scrape time."""

    slots: int  # configured (`models.NAME.slots`)
    slots_busy: int  # held by a sequence that is generating, or reserved for one
    admission_waiting: int  # work waiting in the model's admission queue
    swapped_bytes: int  # KV state of swapped-out sequences held in host memory
    decode_steps: int  # decode steps run so far
    decode_rows: int  # sequences decoded in those steps (rows / steps = the mean batch size)


class ModelObserver:
    """One model's observer; this base ignores everything (metrics off)."""

    def admission_wait(self, seconds: float) -> None:
        """Work was admitted after waiting this long in the admission queue (0: there was room at once)."""

    def first_token(self, seconds: float) -> None:
        """A generation sampled its first token this long after it was submitted (admission wait and prefill)."""

    def generation_done(self, prompt_tokens: int, generated_tokens: int) -> None:
        """A generation ended (finished, failed or cancelled) with this usage."""

    def embeddings_done(self, prompt_tokens: int) -> None:
        """An embeddings call ended with this usage (every token it evaluated)."""

    def attach(self, read: Callable[[], ModelGauges]) -> None:
        """The loaded model says how to read its gauges."""

    # --- residency (engine/local/model_pool.py) ------------------------------------------------------------
    def loaded(self, memory_bytes: int) -> None:
        """The model was loaded; it holds about `memory_bytes` (its footprint: engine/local/footprint.py)."""

    def unloaded(self) -> None:
        """The model was unloaded (idle past its keep-alive, for room under the memory budget, or at close): its
        gauges are gone until it loads again."""


# Model name -> its observer (called once per model, when it is loaded).
Observers = Callable[[str], ModelObserver]
NO_OBSERVER = ModelObserver()


def no_observers(model: str) -> ModelObserver:
    return NO_OBSERVER
