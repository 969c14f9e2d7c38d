"""llama.cpp sampler chains built from `InferencingParams`."""

from __future__ import annotations

import secrets
from typing import Any

from llmhost.domain.types import InferencingParams

_LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp reads this value as "pick a random seed"


def sampler_seed(seed: int | None) -> int:
    """llama.cpp seeds are 32-bit: fold the u64 seed, and never pass the "random" sentinel by accident."""
    if seed is None:
        return secrets.randbelow(_LLAMA_DEFAULT_SEED)
    folded = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    return folded if folded != _LLAMA_DEFAULT_SEED else 0x5EED


def penalty_window(params: InferencingParams, context_length: int) -> int:
    """The repeat window actually used: llama.cpp reserves memory for the whole window up front (4 bytes per
    token: 2^32-1 would cost 16 GiB), and no window can hold more than the context, so it is clamped to it."""
    return min(params.repeat_penalty_last_n_token_count, context_length)


def build_sampler(llama_cpp: Any, n_vocab: int, params: InferencingParams, context_length: int) -> Any:
    """Penalties (over the last N tokens, prompt included: the caller feeds the prompt with `accept`), then
    greedy when temperature is 0, else top-k → top-p → temperature → a seeded random draw."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    if params.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(params.logit_bias))()
        for i, entry in enumerate(params.logit_bias):
            biases[i].token = entry.token_id
            biases[i].bias = entry.bias
        # llama.cpp copies the array: it need not outlive this call.
        add(chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(params.logit_bias), biases))
    penalised = params.repeat_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
    last_n = penalty_window(params, context_length)
    if penalised and last_n > 0:
        add(
            chain,
            llama_cpp.llama_sampler_init_penalties(
                n_vocab, last_n, params.repeat_penalty, params.frequency_penalty, params.presence_penalty
            ),
        )
    if params.temperature == 0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        add(chain, llama_cpp.llama_sampler_init_top_k(min(params.top_k, n_vocab)))
    if params.top_p < 1.0:
        add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    add(chain, llama_cpp.llama_sampler_init_dist(sampler_seed(params.seed)))
    return chain
