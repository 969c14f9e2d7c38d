"""The sequence slots of one llama context: who holds which seq_id, swapping idle sequences out to host memory,
and reusing a cached prompt prefix for a new request.

A slot holder is a `SeqState`: a running generation (busy: never evicted), a guest's idle sequence (evicted by
saving its KV state to host memory, restored on next use), or the leftover of a finished one-off request
(`cached`: kept only as a prompt-prefix cache, discarded when the slot is needed). Callers hold `lock`.
"""

from __future__ import annotations

from collections.abc import Callable

from llmhost.engine.local.decoder import Decoder
from llmhost.engine.local.model_lock import ModelLock
from llmhost.engine.local.planning import reusable_prefix
from llmhost.engine.local.sequence_state import SeqState

MIN_REUSED_PREFIX = 2  # shorter common prefixes (e.g. just the BOS token) are not worth a copy


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SlotPool:
    def __init__(
        self,
        kv: Decoder,
        count: int,
        lock: ModelLock,
        name: str,
        on_free: Callable[[], None] = lambda: None,
        chunk: int | None = None,
    ) -> None:
        self._kv = kv  # the KV-cache operations of the model's decoder
        self.count = count
        self.lock = lock
        self._name = name
        self._on_free = on_free
        self._chunk = chunk  # deterministic mode: prefixes are reused in whole aligned chunks only
        self._free: list[int] = list(range(count))
        self._holders: dict[int, SeqState] = {}
        self.swaps_out = 0
        self.reused_prompt_tokens = 0
        self.swapped_bytes = 0  # KV state of swapped-out sequences held in host memory now

    @property
    def busy(self) -> int:
        """Slots held by a sequence that is generating or reserved for one (read without the lock: metrics)."""
        return sum(1 for state in list(self._holders.values()) if state.busy)

    @property
    def available(self) -> int:
        """Slots a new sequence can take without waiting: free ones and those holding only a prefix cache."""
        with self.lock:
            return len(self._free) + sum(1 for s in self._holders.values() if s.cached)

    # --- taking and giving back ------------------------------------------------------------------------
    def attach(self, state: SeqState, *, reuse_prefix: bool = False) -> bool:
        """Give `state` a slot holding its KV cache (restoring it if it was swapped out); False when every slot
        is busy generating. Never waits: callers wait in the model's admission queue (`admission`)."""
        with self.lock:
            state.touch()
            if state.slot is not None:
                return True
            if reuse_prefix and state.saved is None and state.n_kv == 0 and self._adopt_prefix(state):
                return True
            slot = self._take_slot()
            if slot is None:
                return False
            self._hold(state, slot)
            if state.saved is not None:
                data, state.saved = state.saved, None
                self.swapped_bytes -= len(data)
                if not self._kv.restore(slot, data):
                    state.n_kv = 0  # restore failed: the tokens are re-evaluated on demand (slower, still exact)
                    self._kv.seq_rm(slot, 0)
            else:
                state.n_kv = 0
            return True

    def release(self, state: SeqState) -> None:
        """`state` stopped generating: it may be swapped out again."""
        with self.lock:
            state.busy = False
            self._notify()

    def retire(self, state: SeqState) -> None:
        """A one-off request ended: keep its KV cache only as a prompt-prefix cache for later requests."""
        with self.lock:
            state.busy = False
            state.cached = True
            self._notify()

    def detach(self, state: SeqState) -> None:
        """Forget `state` entirely (its owner is gone): free its slot and any saved KV."""
        with self.lock:
            if state.saved is not None:
                self.swapped_bytes -= len(state.saved)
            state.saved = None
            state.busy = False
            if state.slot is not None:
                self._release_slot(state)
            self._notify()

    def fork(self, source: SeqState) -> SeqState:
        """A new sequence sharing `source`'s KV cache: a metadata-only copy in the unified cache when a slot is
        free (or can be freed) now, else a copy of its saved state in host memory. Never waits for a slot: with
        every other slot busy, waiting for one to hold the copy could wait forever."""
        with self.lock:
            copy = SeqState(list(source.tokens), list(source.token_texts), list(source.logprobs))
            if source.slot is None:  # swapped out (or never evaluated): the copy shares its saved bytes
                copy.saved, copy.n_kv = source.saved, source.n_kv if source.saved is not None else 0
                copy.aligned = source.aligned
                self.swapped_bytes += len(copy.saved or b"")
                return copy
            source.busy = True  # not swapped out while the copy takes a slot
            try:
                slot = self._take_slot()
                if slot is not None:
                    self._hold(copy, slot)
                    self._kv.seq_cp(source.slot, slot, -1)
                    copy.n_kv, copy.aligned = source.n_kv, source.aligned
                elif source.n_kv > 0:
                    copy.saved = self._kv.save(source.slot)
                    if copy.saved is not None:
                        copy.n_kv, copy.aligned = source.n_kv, source.aligned
                        self.swapped_bytes += len(copy.saved)
                return copy
            finally:
                source.busy = False

    def trim(self, state: SeqState, count: int) -> None:
        """Rewind `state` to its first `count` tokens, keeping the KV cache of that prefix."""
        with self.lock:
            if state.saved is not None and not self.attach(state):
                # Swapped out and no slot free now: the saved bytes cannot be cut in place, so they are dropped
                # and the kept tokens are evaluated again on next use (exact, only slower). Never waits.
                self.swapped_bytes -= len(state.saved)
                state.saved, state.n_kv = None, 0
            state.truncate(count)
            if state.slot is not None:
                self._kv.seq_rm(state.slot, state.n_kv)

    def close(self) -> None:
        with self.lock:
            for state in list(self._holders.values()):
                state.slot = None
            self._holders.clear()

    # --- internals -------------------------------------------------------------------------------------
    def _adopt_prefix(self, state: SeqState) -> bool:
        """Start `state` from the longest prompt prefix an idle holder has in the KV cache."""
        best: SeqState | None = None
        best_len = 0
        for holder in self._holders.values():
            if not holder.busy:
                common = common_prefix(holder.tokens[: holder.n_kv], state.tokens)
                length = reusable_prefix(common, min(holder.aligned, holder.n_kv), len(state.tokens), self._chunk)
                if length > best_len:
                    best, best_len = holder, length
        if best is None or best_len < MIN_REUSED_PREFIX:
            return False
        if best.cached and (best_len >= best.n_kv or not self._free):
            slot = best.slot  # take the cache entry's slot over: nothing to copy, and nothing of it is lost
            assert slot is not None
            self._holders.pop(slot)
            best.slot = None
        else:
            # An idle sequence, or a cached prompt that only starts like this one (another system prompt with the
            # same first words) while a slot is free: copy the shared cells, leaving the holder intact for its own.
            best.touch()  # a prefix others start from is worth keeping: it is evicted last among caches
            best.busy = True
            try:
                taken = self._take_slot()
            finally:
                best.busy = False
            if taken is None:
                return False
            slot = taken
            assert best.slot is not None
            self._kv.seq_cp(best.slot, slot, best_len)
        self._hold(state, slot)
        self._kv.seq_rm(slot, best_len)
        state.n_kv = state.aligned = best_len
        state.reused = best_len
        self.reused_prompt_tokens += best_len
        return True

    def _take_slot(self) -> int | None:
        if not self._free and all(s.busy for s in self._holders.values()):
            return None
        if not self._free:
            idle = [s for s in self._holders.values() if not s.busy]
            # Prefix caches go first (nothing is lost but a cache), then the least recently used sequence.
            victim = min(idle, key=lambda s: (not s.cached, s.last_used))
            if victim.cached:
                self._release_slot(victim)
            else:
                self._swap_out(victim)
        return self._free.pop(0)

    def _hold(self, state: SeqState, slot: int) -> None:
        state.slot = slot
        state.cached = False
        self._holders[slot] = state

    def _swap_out(self, state: SeqState) -> None:
        assert state.slot is not None
        slot = state.slot
        if state.n_kv > 0:
            state.saved = self._kv.save(slot)
            if state.saved is None:
                state.n_kv = 0
            else:
                self.swapped_bytes += len(state.saved)
        self.swaps_out += 1
        self._release_slot(state)

    def _release_slot(self, state: SeqState) -> None:
        assert state.slot is not None
        self._kv.seq_rm(state.slot, 0)
        self._holders.pop(state.slot, None)
        self._free.append(state.slot)
        state.slot = None

    def _notify(self) -> None:
        self._on_free()
