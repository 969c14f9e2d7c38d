"""Greedy tokens chosen inside llama.cpp's compute graph (backend sampling, `llama_set_sampler`).

On a GPU the host's argmax over a step's logits rows is the largest part of its time per step (32 rows of Gemma's
262,144-entry vocabulary: 33 MB read, ~0.8 ms, on a 3 ms step). With a greedy sampler chain attached to a
sequence, llama.cpp computes the argmax in the graph, on the device, and `llama_get_sampled_token_ith` gives the
token; where every output of a micro-batch is sampled so, it copies no logits back at all.

Rules of llama.cpp's that shape this (llama-context.cpp, `decode` and `needs_raw_logits`):
- A sequence with a sampler may have at most one output in a decode call (else the call fails).
- Logits rows are copied back only where some output of the micro-batch has no sampler: a row whose logits the
  host reads (log-probabilities, constraints, other samplers, scores) must be in a sequence without one.
- Attaching or detaching a sampler makes the next decode re-reserve the graph: sequences keep theirs between
  steps, and change only when the job holding them changes.

So a sequence gets the greedy chain while it holds a plain greedy generation (`SeqState.greedy`), for the decode
calls where it has at most one output; every other sequence in a decode call gets none. The choice is pure
(`bindings`) and unit-tested; `GreedyChains` applies it to a context.

`backend-sampling` is off by default, on the CPU and on a GPU (`use_backend_sampling`). On the CPU the graph's
argmax is slower than numpy's on the host (measured here, Gemma, 32 rows: +21 ms per step against 1.7 ms). On an
H100 (docs/benchmarks.md, "GPU (measured)") it was never faster and sometimes slower: 0.62× the tokens/s at 8
streams (rows per step fell from 7.9 to 5.7), 1.04× and 0.97× at 32 (Gemma, SmolLM2), with equal greedy tokens.
Turn the GPU default back on only after a GPU run shows it faster at 1, 8 and 32 streams on both built-in models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmhost.engine.local.decoder import BatchRow

LLAMA_TOKEN_NULL = -1  # llama_get_sampled_token_ith's "no token was sampled for this output"
# `backend-sampling`'s default where layers are offloaded to a GPU (on the CPU it is always off by default).
DEFAULT_ON_GPU = False


def use_backend_sampling(configured: bool | None, offloaded: bool) -> bool:
    """Whether a model's decoder attaches greedy chains: `models.NAME.backend-sampling` where set, else the default
    (`offloaded`: layers are offloaded to a GPU, on a build that can)."""
    if configured is not None:
        return configured
    return offloaded and DEFAULT_ON_GPU


def outputs_per_seq(rows: Sequence[BatchRow], logits_at: set[int]) -> dict[int, int]:
    """How many outputs each sequence of the batch has (rows in batch order, `logits_at` batch indices)."""
    counts: dict[int, int] = {}
    index = 0
    for seq, _, tokens in rows:
        end = index + len(tokens)
        counts[seq] = counts.get(seq, 0) + sum(1 for i in logits_at if index <= i < end)
        index = end
    return counts


def bindings(
    rows: Sequence[BatchRow], logits_at: set[int], greedy: set[int], bound: set[int]
) -> tuple[set[int], set[int]]:
    """(sequences to attach the greedy chain to, sequences to detach it from) before decoding `rows`: a sequence
    of the batch keeps or gets one iff it is in `greedy` and has at most one output; sequences outside the batch
    keep what they have."""
    if len(logits_at) <= len(rows) and all(len(tokens) == 1 for _, _, tokens in rows):
        seqs = [seq for seq, _, _ in rows]
        if len(set(seqs)) == len(seqs):  # one token per sequence (a step's decode rows): one output at most each
            want = {seq for seq in seqs if seq in greedy}
            return want - bound, (set(seqs) - want) & bound
    counts = outputs_per_seq(rows, logits_at)
    want = {seq for seq, n in counts.items() if seq in greedy and n <= 1}
    return want - bound, (counts.keys() - want) & bound


class GreedyChains:
    """One greedy sampler chain per sequence id of a context, attached and detached as `bindings` says."""

    def __init__(self, n_seqs: int) -> None:
        self._chains: list[Any] = [None] * n_seqs  # the chain attached to each sequence (None: none)
        self._retired: list[Any] = []  # detached chains, freed once a decode has rebuilt the graph without them
        self.greedy: set[int] = set()  # sequences holding a plain greedy generation (the model keeps it)
        self.bound: set[int] = set()  # sequences whose chain is attached to the context
        self.refused: set[int] = set()  # sequences whose chain llama.cpp could not offload (not asked again)

    def before_decode(self, lib: Any, ctx: Any, rows: Sequence[BatchRow], logits_at: set[int]) -> None:
        """Attach and detach chains for this decode call (`lib`: looked up per call, a simulation replaces it).
        A chain is attached once in its life (llama.cpp initializes its device state then, and asserts on a
        second time): a sequence attached again gets a new one."""
        for chain in self._retired:  # the decode since they were detached re-reserved the graph without them
            lib.llama_sampler_free(chain)
        self._retired.clear()
        greedy = self.greedy - self.refused if self.refused else self.greedy
        attach, detach = bindings(rows, logits_at, greedy, self.bound)
        for seq in detach:
            lib.llama_set_sampler(ctx, seq, None)
            self.bound.discard(seq)
            self._retired.append(self._chains[seq])
            self._chains[seq] = None
        for seq in attach:
            chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            if lib.llama_set_sampler(ctx, seq, chain):
                self._chains[seq] = chain
                self.bound.add(seq)
            else:
                lib.llama_sampler_free(chain)
                self.refused.add(seq)

    def close(self, lib: Any) -> None:
        """Free the chains (after the context they were attached to)."""
        for chain in [*self._chains, *self._retired]:
            if chain is not None:
                lib.llama_sampler_free(chain)
        self._chains = [None] * len(self._chains)
        self._retired.clear()
        self.bound.clear()
