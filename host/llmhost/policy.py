"""Host policy in one place: defaults, limits and the validation messages that name the fix."""

from __future__ import annotations

from .types import InferencingParams, InvalidInput

DEFAULT_MODEL = "gemma-3-270m"
# Spin's defaults for `params: none` (see the WIT doc of `inferencing-params`).
DEFAULT_PARAMS = InferencingParams()
DEFAULT_CONTEXT_LENGTH = 4096
DEFAULT_THREADS = 2
DEFAULT_BATCH_SIZE = 512
# How long a generation waits for a free sequence slot of its model before giving up with `runtime-error`.
SLOT_WAIT_TIMEOUT_S = 300.0
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 256
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def validate_params(params: InferencingParams) -> InferencingParams:
    """Check every field; raise `InvalidInput` naming the field and its allowed range."""
    if params.max_tokens is not None and not 1 <= params.max_tokens <= U32_MAX:
        raise InvalidInput(f"max-tokens must be at least 1 (or none for no limit), got {params.max_tokens}")
    if not params.temperature >= 0:  # also rejects NaN
        raise InvalidInput(f"temperature must be >= 0 (0 is greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise InvalidInput(f"top-p must be in (0, 1], got {params.top_p}")
    if not params.repeat_penalty > 0:
        raise InvalidInput(f"repeat-penalty must be > 0 (1.0 disables it), got {params.repeat_penalty}")
    if not 0 <= params.top_k <= U32_MAX:
        raise InvalidInput(f"top-k must be >= 0 (0 disables it), got {params.top_k}")
    if not 0 <= params.repeat_penalty_last_n_token_count <= U32_MAX:
        raise InvalidInput(
            f"repeat-penalty-last-n-token-count must be >= 0, got {params.repeat_penalty_last_n_token_count}"
        )
    if params.seed is not None and not 0 <= params.seed <= U64_MAX:
        raise InvalidInput(f"seed must be a u64, got {params.seed}")
    if len(params.stop) > MAX_STOP_SEQUENCES:
        raise InvalidInput(f"stop has {len(params.stop)} entries; at most {MAX_STOP_SEQUENCES} are allowed")
    for i, s in enumerate(params.stop):
        if s == "":
            raise InvalidInput(
                f"stop[{i}] is an empty string; stop sequences must be 1 to {MAX_STOP_LENGTH} characters"
            )
        if len(s) > MAX_STOP_LENGTH:
            raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most {MAX_STOP_LENGTH} are allowed")
    return params


def check_prompt_fits(prompt_tokens: int, context_length: int) -> None:
    # At least one token must still fit after the prompt, or nothing can be generated.
    if prompt_tokens >= context_length:
        raise InvalidInput(
            f"prompt is {prompt_tokens} tokens but the context window is {context_length} tokens "
            "(prompt must be shorter; raise the model's `context-length` in the config or shorten the prompt)"
        )
