"""llama.cpp sampler chains built from `InferencingParams`."""

from __future__ import annotations

import secrets
from typing import Any

from ..types import InferencingParams

_LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp reads this value as "pick a random seed"


def sampler_seed(seed: int | None) -> int:
    """llama.cpp seeds are 32-bit: fold the u64 seed, and never pass the "random" sentinel by accident."""
    if seed is None:
        return secrets.randbelow(_LLAMA_DEFAULT_SEED)
    folded = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    return folded if folded != _LLAMA_DEFAULT_SEED else 0x5EED


def build_sampler(llama_cpp: Any, n_vocab: int, params: InferencingParams) -> Any:
    """Penalties (over the last N tokens, prompt included: the caller feeds the prompt with `accept`), then
    greedy when temperature is 0, else top-k → top-p → temperature → a seeded random draw."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    if params.repeat_penalty != 1.0 and params.repeat_penalty_last_n_token_count > 0:
        last_n = min(params.repeat_penalty_last_n_token_count, 2**31 - 1)
        add(chain, llama_cpp.llama_sampler_init_penalties(n_vocab, last_n, params.repeat_penalty, 0.0, 0.0))
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
