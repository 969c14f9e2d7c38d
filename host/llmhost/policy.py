"""Host policy in one place: defaults, limits and the validation messages that name the fix."""

from __future__ import annotations

import math

from .types import BeamParams, Constraint, InferencingParams, InvalidInput

DEFAULT_MODEL = "gemma-3-270m"
DEFAULT_CONTEXT_LENGTH = 4096
DEFAULT_THREADS = 2
DEFAULT_BATCH_SIZE = 512
# How long a generation waits for a free sequence slot of its model before giving up with `runtime-error`.
SLOT_WAIT_TIMEOUT_S = 300.0
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 256
# `logprobs: some(k)`: at most this many alternatives per token (OpenAI's limit too).
MAX_TOP_LOGPROBS = 20
# Frequency and presence penalties: OpenAI's range.
MAX_ABS_PENALTY = 2.0
# A constraint's schema, regex or grammar text, and the choices of `choice`: bounded so compiling one is
# bounded work (compiled grammars are cached by their text).
MAX_CONSTRAINT_BYTES = 256 * 1024
MAX_CHOICES = 1024
# `logit-bias`: entries per call, and the range of a bias (OpenAI's).
MAX_LOGIT_BIAS_ENTRIES = 1024
MAX_ABS_LOGIT_BIAS = 100.0
# Run-scope quotas (defaults of `sandbox.max-open-sequences` / `sandbox.max-open-streams`): each open sequence
# can hold a context window of KV state in host memory once swapped out (~7 MB per 1,000 tokens here).
MAX_OPEN_SEQUENCES = 64
MAX_OPEN_STREAMS = 64
# Default of `sandbox.max-sequence-mb`: host memory one run's sequences may hold (their swapped-out KV state).
MAX_SEQUENCE_MB = 512
# Default of `models.NAME.max-swapped-mb`: host memory for swapped-out sequences' KV state, per model.
MAX_SWAPPED_MB = 2048
# Texts per `generate-embeddings` call (OpenAI's limit); each is also bounded by the context window.
MAX_EMBEDDING_TEXTS = 2048
# Beam search: beams kept per step, tokens per beam, the length-normalisation exponent.
MAX_BEAM_WIDTH = 16
MAX_BEAM_TOKENS = 4096
MAX_LENGTH_PENALTY = 10.0
# Continuations per `sequence.score` call (each is a fork decoded beside the others).
MAX_SCORE_CONTINUATIONS = 256
# Oversized texts are refused by their length before they are tokenized (tokenizing costs 60-130 times the text in
# host memory, and seconds per megabyte). A model whose tokens are pieces of the text (llama.cpp's SentencePiece
# and BPE vocabularies) turns N bytes into at least N / L tokens, L its longest token in bytes (Gemma 3: 48), and
# a character is at least one byte: a text of more than room × L characters cannot fit in `room` tokens. For
# tokenizers that normalize text (WordPiece, Unigram), for remote models tokenized by their server, and for chat
# messages before they are rendered, L is taken as this many bytes per token (a documented cap, not a bound).
MAX_BYTES_PER_TOKEN = 64
# `tokenize` takes texts of at most this many bytes (UTF-8): its result is a token list the host builds whole.
MAX_TOKENIZE_BYTES = 1024 * 1024
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def check_params(params: InferencingParams) -> None:
    """Check every field; raise `InvalidInput` naming the field and its allowed range (NaN and inf included).

    Called when `InferencingParams` is constructed, so every path validates alike. Bounds that depend on the
    model (the repeat window is clamped to the context length) are applied by the engine.
    """
    if params.max_tokens is not None and not 1 <= params.max_tokens <= U32_MAX:
        raise InvalidInput(f"max-tokens must be at least 1 (or none for no limit), got {params.max_tokens}")
    if not 0 <= params.temperature < math.inf:  # also rejects NaN
        raise InvalidInput(f"temperature must be >= 0 and finite (0 is greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise InvalidInput(f"top-p must be in (0, 1], got {params.top_p}")
    if not 0 < params.repeat_penalty < math.inf:
        raise InvalidInput(f"repeat-penalty must be > 0 and finite (1.0 disables it), got {params.repeat_penalty}")
    if not 0 <= params.top_k <= U32_MAX:
        raise InvalidInput(f"top-k must be >= 0 (0 disables it), got {params.top_k}")
    if not 0 <= params.repeat_penalty_last_n_token_count <= U32_MAX:
        raise InvalidInput(
            f"repeat-penalty-last-n-token-count must be >= 0, got {params.repeat_penalty_last_n_token_count}"
        )
    if params.seed is not None and not 0 <= params.seed <= U64_MAX:
        raise InvalidInput(f"seed must be a u64, got {params.seed}")
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(params, name)
        if not -MAX_ABS_PENALTY <= value <= MAX_ABS_PENALTY:
            raise InvalidInput(
                f"{name.replace('_', '-')} must be in [-{MAX_ABS_PENALTY}, {MAX_ABS_PENALTY}] (0 disables it), "
                f"got {value}"
            )
    if params.logprobs is not None and not 0 <= params.logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidInput(
            f"logprobs must be 0 (the sampled token only) to {MAX_TOP_LOGPROBS} alternatives, got {params.logprobs}"
        )
    check_stops(params.stop)
    if len(params.logit_bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise InvalidInput(
            f"logit-bias has {len(params.logit_bias)} entries; at most {MAX_LOGIT_BIAS_ENTRIES} are allowed"
        )
    for i, entry in enumerate(params.logit_bias):
        if not -MAX_ABS_LOGIT_BIAS <= entry.bias <= MAX_ABS_LOGIT_BIAS:
            raise InvalidInput(
                f"logit-bias[{i}].bias must be in [-{MAX_ABS_LOGIT_BIAS}, {MAX_ABS_LOGIT_BIAS}], got {entry.bias}"
            )
        if not 0 <= entry.token_id <= U32_MAX:
            raise InvalidInput(f"logit-bias[{i}].token-id must be a u32, got {entry.token_id}")
    if params.constraint is not None:
        check_constraint(params.constraint)


def check_stops(stop: tuple[str, ...]) -> None:
    if len(stop) > MAX_STOP_SEQUENCES:
        raise InvalidInput(f"stop has {len(stop)} entries; at most {MAX_STOP_SEQUENCES} are allowed")
    for i, s in enumerate(stop):
        if s == "":
            raise InvalidInput(
                f"stop[{i}] is an empty string; stop sequences must be 1 to {MAX_STOP_LENGTH} characters"
            )
        if len(s) > MAX_STOP_LENGTH:
            raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most {MAX_STOP_LENGTH} are allowed")


def check_beam_params(params: BeamParams) -> None:
    """Called when `BeamParams` is constructed, like `check_params`."""
    if not 1 <= params.width <= MAX_BEAM_WIDTH:
        raise InvalidInput(f"width must be 1 to {MAX_BEAM_WIDTH}, got {params.width}")
    if not 1 <= params.max_tokens <= MAX_BEAM_TOKENS:
        raise InvalidInput(f"max-tokens must be 1 to {MAX_BEAM_TOKENS}, got {params.max_tokens}")
    if not 0 <= params.length_penalty <= MAX_LENGTH_PENALTY:  # also rejects NaN
        raise InvalidInput(
            f"length-penalty must be in [0, {MAX_LENGTH_PENALTY}] (0: none), got {params.length_penalty}"
        )
    check_stops(params.stop)


def check_continuations(continuations: list[str]) -> None:
    if len(continuations) > MAX_SCORE_CONTINUATIONS:
        raise InvalidInput(f"score got {len(continuations)} continuations; at most {MAX_SCORE_CONTINUATIONS} per call")


def check_constraint(constraint: Constraint) -> None:
    """The model-independent checks of a constraint (the parser's own checks run when the engine compiles it)."""
    if constraint.kind == "choice":
        if not constraint.options:
            raise InvalidInput("constraint choice needs at least one option, got an empty list")
        if len(constraint.options) > MAX_CHOICES:
            raise InvalidInput(f"constraint choice has {len(constraint.options)} options; at most {MAX_CHOICES}")
        for i, option in enumerate(constraint.options):
            if option == "":
                raise InvalidInput(f"constraint choice[{i}] is an empty string; options must not be empty")
        size = sum(len(o.encode()) for o in constraint.options)
    else:
        size = len(constraint.text.encode())
        if constraint.kind != "json-object" and not constraint.text.strip():
            raise InvalidInput(f"constraint {constraint.kind} is empty")
    if size > MAX_CONSTRAINT_BYTES:
        raise InvalidInput(f"constraint {constraint.kind} is {size} bytes; at most {MAX_CONSTRAINT_BYTES} are allowed")


def check_embedding_texts(texts: list[str]) -> None:
    if len(texts) > MAX_EMBEDDING_TEXTS:
        raise InvalidInput(f"generate-embeddings got {len(texts)} texts; at most {MAX_EMBEDDING_TEXTS} per call")


# Spin's defaults for `params: none` (see the WIT doc of `inferencing-params`).
DEFAULT_PARAMS = InferencingParams()


def check_text_length(what: str, length: int, room: int, context_length: int, bytes_per_token: int) -> None:
    """Refuse a text of `length` characters when it is too long to be tokenized into `room` tokens or fewer,
    before tokenizing it: it has at least length / bytes_per_token tokens (see `MAX_BYTES_PER_TOKEN`). Costs
    nothing (no encoding)."""
    if length > max(room, 0) * bytes_per_token:
        left = "" if room == context_length else f" ({max(room, 0)} of them left)"
        raise InvalidInput(
            f"{what} is {length} characters: more than the context window of {context_length} tokens{left} can "
            f"hold (a token of this model is at most {bytes_per_token} bytes); shorten it or raise the model's "
            "`context-length` in the config"
        )


def check_tokenize_length(text: str) -> None:
    """`tokenize` builds its whole result: its text is capped (`MAX_TOKENIZE_BYTES`), checked before encoding."""
    size = len(text) if len(text) > MAX_TOKENIZE_BYTES else len(text.encode())
    if size > MAX_TOKENIZE_BYTES:
        raise InvalidInput(
            f"tokenize got a text of at least {size} bytes; at most {MAX_TOKENIZE_BYTES} bytes per call "
            "(tokenize a long text in parts)"
        )


def check_prompt_fits(prompt_tokens: int, context_length: int) -> None:
    # At least one token must still fit after the prompt, or nothing can be generated.
    if prompt_tokens >= context_length:
        raise InvalidInput(
            f"prompt is {prompt_tokens} tokens but the context window is {context_length} tokens "
            "(prompt must be shorter; raise the model's `context-length` in the config or shorten the prompt)"
        )
