"""`AffinityRouter`: Ray Serve's request router for `backend = "ray"` models (it runs in each caller's process).

- A call on a sequence (`replica=` its replica's id) goes to that replica: its KV cache is there. When that replica
  is gone, the call goes anywhere, and the replica that gets it rebuilds the sequence (replica.py).
- A request with an affinity key (the prompt's start) prefers the replica that rendezvous hashing picks for the key,
  while that replica has a free slot: requests sharing a system prompt meet its prefix cache there.
- Anything else, or a preferred replica that is full: Ray's own power-of-two-choices by queue length.
"""

from __future__ import annotations

import hashlib

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RunningReplica


def rendezvous(key: str, replicas: list[RunningReplica]) -> RunningReplica:
    """The replica with the highest hash of (key, replica): stable while replicas come and go, and only the keys of
    a replica that left move."""

    def weight(replica: RunningReplica) -> bytes:
        return hashlib.blake2b(f"{key}\0{replica.replica_id.unique_id}".encode(), digest_size=8).digest()

    return max(replicas, key=weight)


class AffinityRouter(PowerOfTwoChoicesRequestRouter):
    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        kwargs = pending_request.kwargs if pending_request is not None else {}
        pinned = kwargs.get("replica")
        if pinned:
            for replica in candidate_replicas:
                if replica.replica_id.unique_id == pinned:
                    return [[replica]]
        key = kwargs.get("affinity")
        if key and candidate_replicas:
            preferred = rendezvous(key, candidate_replicas)
            if self.select_available_replicas([preferred]):
                rest = [r for r in candidate_replicas if r is not preferred]
                fallback = await super().choose_replicas(rest, pending_request) if rest else []
                return [[preferred], *fallback]
        return await super().choose_replicas(candidate_replicas, pending_request)
