"""How long a grant's host call may wait on the outside world within its run's deadline."""

from __future__ import annotations

from llmhost.domain.limits import DEADLINE_MARGIN_S


def before_deadline(time_left: float) -> float:
    """How long a host call that waits on the outside world (a store, an outbound request) may wait, given the run's
    `time_left`: it gives up a little before the deadline (a tenth of the time left, at most DEADLINE_MARGIN_S), so
    that the guest still runs to act on the error."""
    return time_left - min(time_left / 10, DEADLINE_MARGIN_S)
