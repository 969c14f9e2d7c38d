"""Bytes handed into a guest reserve their host-memory cost first (grants/transfers.py), held until the guest runs
again: one rule for every host function that can return a large byte list (outbound bodies, key-value values)."""

from __future__ import annotations

from typing import Any

from llmhost.domain.limits import OUTBOUND_TIMEOUT_S
from llmhost.grants.transfers import TransferBudget, lowered_cost
from llmhost.runtime.host_funcs import hold_until_lowered
from llmhost.runtime.sandbox import scope_of


def hand_over(store: Any, budget: TransferBudget, size: int, what: str) -> None:
    """Reserve what handing `size` bytes to the guest costs, waiting within the run's time left (the host's outbound
    timeout when it has no deadline); released once the guest has them. `TooLarge` naming the budget's key when it
    cannot be had."""
    if size <= 0:
        return
    time_left = scope_of(store).time_left()
    cost = budget.reserve(lowered_cost(size), what, OUTBOUND_TIMEOUT_S if time_left is None else time_left)
    hold_until_lowered(store, lambda: budget.release(cost))
