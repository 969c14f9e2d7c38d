"""Which sequences get llama.cpp's in-graph greedy sampler for a decode call (backend_greedy.bindings), checked
against its definition on random batches, and applied to a recording stand-in for the context."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llmhost.engine.local.backend_greedy import GreedyChains, bindings, outputs_per_seq

SEQS = st.integers(min_value=0, max_value=5)


@st.composite
def decode_calls(draw: Any) -> tuple[list[tuple[int, int, list[int]]], set[int], set[int], set[int]]:
    rows = [
        (draw(SEQS), draw(st.integers(0, 100)), [0] * draw(st.integers(1, 4))) for _ in range(draw(st.integers(1, 5)))
    ]
    n = sum(len(tokens) for _, _, tokens in rows)
    logits_at = draw(st.sets(st.integers(0, n - 1)))
    return rows, logits_at, draw(st.sets(SEQS)), draw(st.sets(SEQS))


def test_outputs_per_seq_counts_each_sequences_logits_rows() -> None:
    rows = [(3, 0, [1, 2, 3]), (1, 7, [4]), (3, 3, [5, 6])]  # batch indices 0-2, 3, 4-5
    assert outputs_per_seq(rows, {2, 3, 4, 5}) == {3: 3, 1: 1}
    assert outputs_per_seq(rows, set()) == {3: 0, 1: 0}


@given(decode_calls())
def test_bindings_attach_exactly_to_greedy_sequences_with_one_output_at_most(
    call: tuple[list[tuple[int, int, list[int]]], set[int], set[int], set[int]],
) -> None:
    rows, logits_at, greedy, bound = call
    attach, detach = bindings(rows, logits_at, greedy, bound)
    counts: dict[int, int] = {}
    index = 0
    for seq, _, tokens in rows:
        for i in range(index, index + len(tokens)):
            counts[seq] = counts.get(seq, 0) + (i in logits_at)
        counts.setdefault(seq, 0)
        index += len(tokens)
    after = (bound | attach) - detach
    for seq in range(6):
        if seq in counts:  # in the batch: a chain iff greedy with at most one output (llama.cpp's rule)
            assert (seq in after) == (seq in greedy and counts[seq] <= 1), (seq, counts, greedy)
        else:  # outside it: unchanged (no needless graph re-reserve)
            assert (seq in after) == (seq in bound)
    assert not attach & bound and detach <= bound  # only real changes


class _Lib:
    """Records llama_set_sampler calls; `refuse`: sequences whose chain cannot be offloaded."""

    def __init__(self, refuse: frozenset[int] = frozenset()) -> None:
        self.calls: list[tuple[int, bool]] = []
        self.freed = 0
        self.refuse = refuse

    def llama_sampler_chain_default_params(self) -> object:
        return object()

    def llama_sampler_chain_init(self, _params: object) -> list[str]:
        return []

    def llama_sampler_init_greedy(self) -> str:
        return "greedy"

    def llama_sampler_chain_add(self, chain: list[str], sampler: str) -> None:
        chain.append(sampler)

    def llama_set_sampler(self, _ctx: object, seq: int, chain: object) -> bool:
        self.calls.append((seq, chain is not None))
        return seq not in self.refuse

    def llama_sampler_free(self, _chain: object) -> None:
        self.freed += 1


def test_chains_change_only_when_a_sequence_changes_hands() -> None:
    lib = _Lib(refuse=frozenset({2}))
    chains = GreedyChains(4)
    chains.greedy = {0, 1, 2}
    step = [(0, 10, [5]), (1, 20, [6]), (2, 30, [7]), (3, 40, [8])]
    chains.before_decode(lib, None, step, {0, 1, 2, 3})
    assert sorted(lib.calls) == [(0, True), (1, True), (2, True)]
    assert chains.bound == {0, 1} and lib.freed == 1  # 2's was refused (its tokens come from its logits), freed
    lib.calls.clear()
    chains.before_decode(lib, None, step, {0, 1, 2, 3})
    assert lib.calls == []  # steady state: nothing changes (and the refused one is not asked again)
    chains.greedy = {0}  # 1's generation ended; its sequence now scores 3 tokens
    chains.before_decode(lib, None, [(0, 11, [5]), (1, 21, [1, 2, 3])], {0, 1, 2, 3})
    assert lib.calls == [(1, False)] and chains.bound == {0} and lib.freed == 1  # kept until the next decode
    chains.greedy = {0, 1}  # a greedy generation on 1 again: a new chain (one is attached once in its life)
    chains.before_decode(lib, None, [(0, 12, [5]), (1, 24, [9])], {0, 1})
    assert lib.calls[-1] == (1, True) and chains.bound == {0, 1} and lib.freed == 2
    chains.close(lib)
    assert lib.freed == 4 and not chains.bound
