"""Host configuration: pydantic models and TOML loading. Every error names the key (and the file)."""

from __future__ import annotations

import importlib.util
import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmhost.domain.hosts import parse_allowed_host
from llmhost.domain.limits import (
    BUILTIN_MODELS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONTEXT_LENGTH,
    DEFAULT_STORE,
    DEFAULT_THREADS,
    MAX_GUEST_MEMORY_MB,
    MAX_KV_VALUE_BYTES,
    MAX_KV_VALUE_BYTES_CEILING,
    MAX_OPEN_SEQUENCES,
    MAX_OPEN_STREAMS,
    MAX_OUTBOUND_REQUESTS,
    MAX_RESPONSE_BYTES,
    MAX_SEQUENCE_MB,
    MAX_SWAPPED_MB,
    STREAM_IDLE_TIMEOUT_S,
)
from llmhost.domain.redaction import redact_url
from llmhost.domain.stores import grant_reaches, redis_address, redis_url_problem, store_file_name

_log = logging.getLogger(__name__)


def kebab(name: str) -> str:
    return name.replace("_", "-")


class Section(BaseModel):
    # Errors never quote the input: it may hold a password (a Redis `url`) or a config value.
    model_config = ConfigDict(
        alias_generator=kebab, populate_by_name=True, extra="forbid", frozen=True, hide_input_in_errors=True
    )


# `models.NAME.keep-alive-s`: its default, and the value that keeps a model loaded for good.
DEFAULT_KEEP_ALIVE_S = 300.0
KEEP_ALIVE_FOREVER = -1.0


class ModelConfig(Section):
    """One model. `path: None` means a built-in model's file (Gemma 3 270M, SmolLM2 or all-MiniLM-L6-v2)."""

    path: Path | None = None
    context_length: int = Field(DEFAULT_CONTEXT_LENGTH, ge=16)
    n_gpu_layers: int = Field(0, ge=-1)  # -1 offloads every layer (CUDA build needed)
    # Greedy generations' tokens chosen inside llama.cpp's compute graph (on the GPU: only the token id comes
    # back, and no logits where every row of a step is greedy). None: the default, off on the CPU and on a GPU
    # (an H100 measured it no faster, 0.62× at 8 streams: engine/local/backend_greedy.py); true turns it on.
    backend_sampling: bool | None = None
    threads: int = Field(DEFAULT_THREADS, ge=1)
    batch_size: int = Field(DEFAULT_BATCH_SIZE, ge=1)
    slots: int = Field(4, ge=1, le=64)  # sequences decoded together / resident in the KV cache at once
    # Outputs under batching equal outputs run alone (no CPU weight repacking, whose kernels depend on a row's
    # place in the batch). false: let llama.cpp repack weights, which may be faster on some CPUs.
    exact_batching: bool = True
    # A new request starts from the longest prompt prefix an idle slot or sequence holds in the KV cache. The
    # rest of its prompt is then evaluated as a batch starting mid-sequence, which llama.cpp's CPU kernels round
    # differently from one whole-prompt batch: greedy output can differ at near-ties from a run without reuse.
    prefix_cache: bool = True
    # The same seeded request gives the same text and token ids whatever else the model is doing: alone, with a
    # warm prefix cache, batched with other requests, after other traffic (docs/performance.md, "Deterministic
    # mode"). One KV stream per slot, prompts in position-aligned chunks each decoded on its own. Costs some
    # throughput.
    deterministic: bool = False
    # Host memory the model may hold for swapped-out sequences (idle ones beyond `slots`). Over it, opening or
    # forking a sequence fails with `invalid-input` naming this key; nothing is evicted silently.
    max_swapped_mb: int = Field(MAX_SWAPPED_MB, ge=1)
    # How long the model stays loaded once idle (no generation in flight, no open sequence), in seconds: -1 keeps it
    # loaded until the host closes (and never unloads it for room under `[engine] memory-budget-mb`), 0 unloads it as
    # soon as it is idle. It loads again at its next use (engine/local/model_pool.py).
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    # The chat template (Jinja, Hugging Face conventions) used instead of the model file's
    # `tokenizer.chat_template`: inline text, or a file (relative to the config file). Inline wins.
    chat_template: str | None = None
    chat_template_file: Path | None = None
    # Other names this model answers to everywhere (requests, allow-lists), e.g. hosted models' names so that an
    # OpenAI client configured for one works unchanged. An alias is no model's name and no other alias.
    aliases: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    # How an embedding is pooled from the last hidden states: None takes the GGUF's `<arch>.pooling_type` (mean for
    # generative models without one); "mean" | "cls" (the first token) | "last" (the last token) override it.
    pooling: Literal["mean", "cls", "last"] | None = None
    # A model only for embeddings: every generation call is refused with `model-not-supported`, and the model gets
    # no generation slots or KV cache. Implied by a GGUF whose attention is non-causal (BERT, nomic-bert).
    embeddings_only: bool = False
    # What the model is: "base" (pretrained), "instruct" (chat-tuned) or "embedding". None: known for the built-ins,
    # else read from the GGUF (a chat template of its own: instruct; non-causal attention or pooling: embedding).
    # "embedding" implies `embeddings-only`.
    kind: Literal["base", "instruct", "embedding"] | None = None

    # --- a model from the Hugging Face Hub (`llmhost pull`, docs/models.md) ---------------------------------
    # The repo, e.g. "bartowski/Qwen2.5-0.5B-Instruct-GGUF", and which GGUF of it: a file name or a glob
    # ("*Q4_K_M.gguf"; a split GGUF's first part stands for all). The file is taken from the Hub's cache (HF_HOME):
    # `llmhost pull` or `--pull` download it. Exclusive with `path`.
    hf_repo: str | None = Field(None, min_length=3, pattern=r"^[\w.-]+/[\w.-]+$")
    hf_file: str | None = Field(None, min_length=1)
    hf_revision: str = Field("main", min_length=1)  # a branch, tag or commit

    # --- where the model runs (docs/scale-out.md) ---------------------------------------------------------
    # "llama-cpp": in this process. "openai": on remote OpenAI-compatible servers (vLLM, SGLang, llama.cpp's
    # server, llama-cpp-python's server, another llmhost); `slots` is then how many requests it has in flight.
    # "ray": in a Ray Serve deployment on the cluster `[cluster] ray-address` names, whose replicas run this same
    # local engine (docs/scale-out.md).
    backend: Literal["llama-cpp", "openai", "ray"] = "llama-cpp"
    base_urls: tuple[str, ...] = ()  # e.g. ["http://10.0.0.5:8000/v1"]; requests go round-robin over them
    remote_model: str | None = None  # the name the server serves it under (default: this model's name)
    # The environment variable holding the API key (sent as a bearer token). The key itself never appears in a
    # config file or a log.
    api_key_env: str | None = None
    # Which server it is: decides which of our parameters can be mapped onto its fields (docs/scale-out.md).
    server: Literal["generic", "vllm", "sglang", "llama-cpp-server", "llama-cpp-python", "llmhost"] = "generic"
    # Send sequences' token ids as the prompt (the server's prefix cache then reuses them exactly). Default: on
    # for servers known to accept token-id prompts (vLLM, SGLang, llama.cpp's server).
    token_prompts: bool | None = None
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)  # the longest silence allowed while waiting for the next chunk
    retries: int = Field(3, ge=0, le=20)  # extra attempts after 429/503 or a refused connection

    # --- backend = "ray": the deployment's replicas (Ray decides where they run, restarts and scales them) -------
    replicas: int | None = Field(None, ge=1)  # a fixed count; else autoscaling between the two below (default 1)
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    target_ongoing_requests: float | None = Field(None, gt=0)  # autoscaling's target per replica (default: slots)
    upscale_delay_s: float = Field(5.0, ge=0)  # how long load must stay above the target before a replica is added
    downscale_delay_s: float = Field(60.0, ge=0)  # ... below it before one is removed
    replica_cpus: float = Field(1.0, ge=0)  # each replica's Ray resources (`replica-gpus = 1` with n-gpu-layers = -1)
    replica_gpus: float = Field(0.0, ge=0)
    # Requests sharing a prompt's start go to the replica that last served it (its prefix cache), while it has a free
    # slot; false spreads them by load alone.
    prefix_affinity: bool = True

    @model_validator(mode="after")
    def _check_backend(self) -> ModelConfig:
        if self.backend == "openai" and not self.base_urls:
            raise ValueError('`base-urls` is required with backend = "openai" (e.g. ["http://host:8000/v1"])')
        if self.backend == "openai" and self.deterministic:
            # A remote server batches and caches as it likes: the guarantee cannot be given for it.
            raise ValueError('`deterministic = true` needs backend = "llama-cpp" (a remote server decides its batches)')
        if self.deterministic and not self.exact_batching:
            raise ValueError("`deterministic = true` needs `exact-batching = true` (repacked weights round by batch)")
        for url in self.base_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"`base-urls`: {url!r} is not an http(s) URL")
        return self._check_ray()._check_hub()._check_kind()

    @field_validator("keep_alive_s")
    @classmethod
    def _check_keep_alive(cls, value: float) -> float:
        if value != KEEP_ALIVE_FOREVER and value < 0:
            raise ValueError("`keep-alive-s` is seconds (0: unload as soon as idle), or -1 to keep the model loaded")
        return value

    def _check_ray(self) -> ModelConfig:
        ray_keys = sorted(kebab(k) for k in self.model_fields_set & RAY_MODEL_KEYS)
        if self.backend != "ray":
            if ray_keys:
                raise ValueError(f'{", ".join(f"`{k}`" for k in ray_keys)}: only with backend = "ray"')
            return self
        autoscaled = self.model_fields_set & AUTOSCALING_KEYS
        if self.replicas is not None and autoscaled:
            raise ValueError("`replicas` is a fixed count: drop it, or drop `min-replicas`/`max-replicas`")
        low, high = self.min_replicas or 0, self.max_replicas
        if high is not None and low > high:
            raise ValueError(f"`min-replicas` ({low}) is more than `max-replicas` ({high})")
        return self

    def _check_hub(self) -> ModelConfig:
        if self.hf_repo is not None and self.path is not None:
            raise ValueError("`hf-repo` and `path` both name the model's file: keep one")
        if self.hf_repo is None and (self.hf_file is not None or "hf_revision" in self.model_fields_set):
            raise ValueError("`hf-file` and `hf-revision` need `hf-repo`")
        if self.hf_repo is not None and self.backend == "openai":
            raise ValueError('`hf-repo` is for backend = "llama-cpp" (a remote server has its own files)')
        return self

    def _check_kind(self) -> ModelConfig:
        if self.kind is None:
            return self
        if "embeddings_only" in self.model_fields_set and self.embeddings_only != (self.kind == "embedding"):
            raise ValueError(
                f'`kind = "{self.kind}"` and `embeddings-only = {str(self.embeddings_only).lower()}` disagree '
                '(`kind = "embedding"` goes with `embeddings-only = true`, any other kind with false)'
            )
        if self.kind == "embedding" and not self.embeddings_only:
            object.__setattr__(self, "embeddings_only", True)  # frozen: set once, while validating
        return self


RAY_MODEL_KEYS = frozenset(
    {"replicas", "min_replicas", "max_replicas", "target_ongoing_requests", "replica_cpus", "replica_gpus"}
    | {"prefix_affinity", "upscale_delay_s", "downscale_delay_s"}
)


AUTOSCALING_KEYS = frozenset(
    {"min_replicas", "max_replicas", "target_ongoing_requests", "upscale_delay_s", "downscale_delay_s"}
)


class ClusterConfig(Section):
    """`[cluster]`: the Ray cluster that `backend = "ray"` models run on."""

    # "auto" (the cluster this machine belongs to), "HOST:PORT" (its GCS address) or "ray://HOST:10001" (Ray Client).
    ray_address: str | None = Field(None, min_length=1)
    connect_timeout_s: float = Field(15.0, gt=0)  # a bad or unreachable address fails within this


class TelemetryConfig(Section):
    """`[telemetry]`: OpenTelemetry traces of `serve` and `mcp` (llmhost/telemetry/). Off unless an OTLP endpoint is
    set here or in `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`."""

    # The collector's OTLP/HTTP base URL (as OTEL_EXPORTER_OTLP_ENDPOINT): spans go to its /v1/traces.
    otlp_endpoint: str | None = Field(None, pattern=r"^https?://[^\s]+$")
    capture_content: bool = False  # prompts and completions in the spans (off: they may be private)


def check_cluster(models: Mapping[str, ModelConfig], cluster: ClusterConfig) -> None:
    """A Ray model needs `[cluster] ray-address`, and Ray itself (the `ray` extra): refused at load."""
    ray_models = [name for name, model in models.items() if model.backend == "ray"]
    if not ray_models:
        return
    if cluster.ray_address is None:
        raise ValueError(
            f'model {ray_models[0]!r} has backend = "ray": set `[cluster] ray-address` ("auto", "HOST:PORT" or '
            '"ray://HOST:10001")'
        )
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.serve") is None:
        raise ValueError(
            f'model {ray_models[0]!r} has backend = "ray", but Ray is not installed: pip install llmhost[ray]'
        )


class LlamaCppEngineConfig(Section):
    kind: Literal["llama-cpp"] = "llama-cpp"
    # The memory the loaded local models may use together, in MB (each: its GGUF file plus its KV cache,
    # engine/local/footprint.py). A model that does not fit unloads the least recently used idle ones first; when
    # none is idle its request waits, up to its deadline. None: no limit.
    memory_budget_mb: int | None = Field(None, ge=1)


class FakeEngineConfig(Section):
    """A deterministic engine for tests of host policy; it replays `script`."""

    kind: Literal["fake"] = "fake"
    script: str = "Hello from the fake engine."
    context_length: int = 64


class FakeDecoderEngineConfig(Section):
    """The local engine (slots, batching, sequences, prefix cache) over a deterministic decoder with no model:
    tests and benchmarks of scheduling and scale-out. A token per byte; each decode step sleeps `step-ms`, as a
    GPU-bound step that leaves the host's CPU free."""

    kind: Literal["fake-decoder"] = "fake-decoder"
    step_ms: float = Field(0.0, ge=0)
    context_length: int = Field(256, ge=16)


EngineConfig = Annotated[LlamaCppEngineConfig | FakeEngineConfig | FakeDecoderEngineConfig, Field(discriminator="kind")]


def alias_map(models: Mapping[str, ModelConfig]) -> dict[str, str]:
    """Each alias (`models.NAME.aliases`) -> the name of the model it stands for."""
    return {alias: name for name, model in models.items() for alias in model.aliases}


def check_aliases(models: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
    """An alias names one model: it is no model's name and is listed once. Errors name both places."""
    seen: dict[str, str] = {}  # alias -> the key that lists it
    for name, model in models.items():
        key = f"`models.{name}.aliases`"
        for alias in model.aliases:
            if alias in models:
                raise ValueError(f"alias {alias!r} in {key} is also a model's name (`models.{alias}`)")
            if alias in seen:
                where = f"twice in {key}" if seen[alias] == key else f"in {seen[alias]} and in {key}"
                raise ValueError(f"alias {alias!r} is listed {where} (an alias names one model)")
            seen[alias] = key
    return models


class EnvValue(Section):
    """A config value taken from the host's environment (`TOKEN = { env = "MY_TOKEN" }`): read when the component is
    loaded, never logged and never shown by any command."""

    env: str = Field(min_length=1)


class GrantsConfig(Section):
    """What a component may reach beyond the model (docs/grants.md); nothing by default. The same keys under
    `[sandbox]` (`llmhost run`, the Python API) and `[components.NAME]` (`serve`, `mcp`)."""

    # Key-value stores the guest may open (`[key-value.NAME]` tables, or "default"); any other gets
    # `access-denied`, a name no table declares `no-such-store`.
    key_value_stores: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    # Config values the guest reads through `wasi:config/store`: text, or `{ env = "VAR" }`.
    config: dict[str, str | EnvValue] = Field(default_factory=dict)
    # Hosts the guest may send HTTP requests to, in Spin's syntax: "https://api.example.com",
    # "https://*.example.com:443", "http://localhost:*", "http://127.0.0.1:8080". Anything else is `denied`.
    allowed_outbound_hosts: tuple[str, ...] = ()
    max_response_bytes: int = Field(MAX_RESPONSE_BYTES, ge=1)  # a larger outbound response body is `too-large`
    max_outbound_requests: int = Field(MAX_OUTBOUND_REQUESTS, ge=0)  # per run or request, redirects included

    @field_validator("allowed_outbound_hosts")
    @classmethod
    def _valid_hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        from llmhost.domain.hosts import parse_allowed_host

        for host in hosts:
            parse_allowed_host(host)  # ValueError names what is wrong with it
        return hosts


class SandboxConfig(GrantsConfig):
    """What guests may reach. Everything is off by default: stdout/stderr only."""

    env: dict[str, str] = Field(default_factory=dict)  # environment variables granted to guests
    read_only_dir: Path | None = None  # preopened read-only at `guest-dir`
    guest_dir: str = "/data"
    inherit_network: bool = False
    max_memory_mb: int = Field(MAX_GUEST_MEMORY_MB, ge=16)
    timeout_s: float | None = Field(None, gt=0)  # wall-clock limit of one guest call (epoch interruption)
    # An `inference-stream` left unread this long is cancelled (it holds an engine slot); None: never.
    stream_idle_timeout_s: float | None = Field(STREAM_IDLE_TIMEOUT_S, gt=0)
    # Run-scope quotas (see docs/configuration.md, "Run scopes"): what one run or request may hold open at once.
    # Over a quota, `open`/`fork`/`infer-stream` get `invalid-input` naming the key.
    max_open_sequences: int = Field(MAX_OPEN_SEQUENCES, ge=1)
    max_open_streams: int = Field(MAX_OPEN_STREAMS, ge=1)
    max_sequence_mb: int = Field(MAX_SEQUENCE_MB, ge=1)  # host memory one run's sequences may hold


class KeyValueStoreConfig(Section):
    """A key-value store (`[key-value.NAME]`) that components granted it may open. `default` exists without a table:
    SQLite in the data directory."""

    backend: Literal["sqlite", "redis"] = "sqlite"
    path: Path | None = None  # sqlite: the database file (relative to the config file); default DATA-DIR/kv/NAME.db
    url: str | None = None  # redis: e.g. "redis://127.0.0.1:6379/0"
    max_value_bytes: int = Field(MAX_KV_VALUE_BYTES, ge=1, le=MAX_KV_VALUE_BYTES_CEILING)  # see limits.py
    max_keys: int | None = Field(None, ge=1)
    max_store_bytes: int | None = Field(None, ge=1)  # keys and values together

    @model_validator(mode="after")
    def _check_backend(self) -> KeyValueStoreConfig:
        if self.backend == "redis":
            if self.url is None:
                raise ValueError('`url` is required with backend = "redis" (e.g. "redis://127.0.0.1:6379/0")')
            if not self.url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"`url`: {redact_url(self.url)!r} is not a redis:// (or rediss://, unix://) URL")
            problem = redis_url_problem(self.url)
            if problem is not None:
                raise ValueError(f"`url`: {problem}")
            if self.path is not None:
                raise ValueError('`path` is for backend = "sqlite"; a Redis store takes `url`')
        elif self.url is not None:
            raise ValueError('`url` is for backend = "redis"; a SQLite store takes `path`')
        return self


def default_stores() -> dict[str, KeyValueStoreConfig]:
    return {DEFAULT_STORE: KeyValueStoreConfig()}


def with_default_store(stores: dict[str, KeyValueStoreConfig]) -> dict[str, KeyValueStoreConfig]:
    """The declared stores and `default`, which exists without a table; checked by `check_store_files`."""
    return check_store_files(stores if DEFAULT_STORE in stores else {DEFAULT_STORE: KeyValueStoreConfig(), **stores})


def check_store_files(stores: dict[str, KeyValueStoreConfig]) -> dict[str, KeyValueStoreConfig]:
    """Two stores never share a file: SQLite stores without a `path` whose file names differ only in case (one file
    on case-insensitive file systems, macOS's and Windows') are refused, naming both keys."""
    seen: dict[str, str] = {}
    for name, store in stores.items():
        if store.backend == "sqlite" and store.path is None:
            file = store_file_name(name)
            other = seen.setdefault(file.casefold(), name)
            if other != name:
                raise ValueError(
                    f"`key-value.{other}` and `key-value.{name}` would share the file DATA-DIR/kv/{file} (names "
                    "that differ only in case are one file on case-insensitive file systems): rename one, or give it "
                    "a `path`"
                )
    return stores


def warn_redis_grants(stores: Mapping[str, KeyValueStoreConfig], grants: Mapping[str, GrantsConfig]) -> None:
    """Warn of each `allowed-outbound-hosts` entry that reaches a Redis store's address (`grants`: the table key,
    e.g. `sandbox`, -> its grants): its guests could send requests to that Redis itself, past `key-value-stores`."""
    for name, store in stores.items():
        address = redis_address(store.url) if store.backend == "redis" and store.url is not None else None
        if address is None:
            continue
        for key, config in grants.items():
            for pattern in config.allowed_outbound_hosts:
                if grant_reaches(parse_allowed_host(pattern), *address):
                    _log.warning(
                        "`%s.allowed-outbound-hosts` entry %r reaches the Redis of `key-value.%s.url` (%s port %d): "
                        "the component can send requests to that Redis directly, past its `key-value-stores` grant "
                        "and the store quotas (grant a narrower host or port)",
                        key, pattern, name, address[0], address[1],
                    )  # fmt: skip


def _default_models() -> dict[str, ModelConfig]:
    return {name: ModelConfig() for name in BUILTIN_MODELS}


CompileStrategy = Literal["fast-first", "optimized", "fast"]


def default_compile_strategy() -> CompileStrategy:
    chosen = os.environ.get("LLMHOST_COMPILE_STRATEGY") or "fast-first"
    for strategy in get_args(CompileStrategy):
        if strategy == chosen:
            return strategy
    raise ConfigError(
        f"LLMHOST_COMPILE_STRATEGY={chosen!r} is not a compile strategy: set it to one of "
        f"{', '.join(get_args(CompileStrategy))}, or unset it"
    )


class HostingConfig(Section):
    """The checks across keys that HostConfig and shell/config.py's AppConfig both make, defined once."""

    if TYPE_CHECKING:  # each subclass declares these fields (with defaults of its own)
        models: dict[str, ModelConfig]
        key_value: dict[str, KeyValueStoreConfig]
        cluster: ClusterConfig

    def grants_configs(self) -> dict[str, GrantsConfig]:
        """The config tables that grant components their reach, by key (`sandbox`, `components.NAME`)."""
        raise NotImplementedError

    @field_validator("models", check_fields=False)
    @classmethod
    def _valid_aliases(cls, models: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        return check_aliases(models)

    @model_validator(mode="after")
    def _across_keys(self) -> Self:
        warn_redis_grants(self.key_value, self.grants_configs())
        check_cluster(self.models, self.cluster)
        return self


class HostConfig(HostingConfig):
    engine: EngineConfig = Field(default_factory=LlamaCppEngineConfig)
    models: dict[str, ModelConfig] = Field(default_factory=_default_models)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    cache_dir: Path = Field(default_factory=lambda: default_cache_dir())
    # Where state lives (the `default` key-value store): $LLMHOST_DATA_DIR, else $XDG_DATA_HOME/llmhost, else
    # ~/.local/share/llmhost. Never the cache directory: a cache may be deleted, state may not.
    data_dir: Path = Field(default_factory=lambda: default_data_dir())
    key_value: dict[str, KeyValueStoreConfig] = Field(default_factory=default_stores)
    # "fast-first": a component without optimized code cached is compiled with Winch (seconds) and runs at once,
    # Cranelift compiles it in the background for the next run; "optimized": always wait for Cranelift; "fast":
    # Winch only, nothing in the background (CI and other short-lived runs, where a Cranelift compile never pays).
    # Default: $LLMHOST_COMPILE_STRATEGY, else "fast-first".
    compile_strategy: CompileStrategy = Field(default_factory=default_compile_strategy)
    # `transfer-memory-mb`: host memory that byte lists handed into guests may take at once, all components together
    # (grants/transfers.py). None: an eighth of this machine's memory, between 256 MB and 2 GB.
    transfer_memory_mb: int | None = Field(default=None, ge=16)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @field_validator("key_value")
    @classmethod
    def _default_store(cls, stores: dict[str, KeyValueStoreConfig]) -> dict[str, KeyValueStoreConfig]:
        return with_default_store(stores)

    def grants_configs(self) -> dict[str, GrantsConfig]:
        return {"sandbox": self.sandbox}


def default_data_dir() -> Path:
    env = os.environ.get("LLMHOST_DATA_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "llmhost"


def stores_relative_to(stores: dict[str, KeyValueStoreConfig], base: Path) -> dict[str, KeyValueStoreConfig]:
    """SQLite paths in `[key-value.NAME]` are relative to the config file."""
    return {
        name: store.model_copy(update={"path": base / store.path})
        if store.path is not None and not store.path.is_absolute()
        else store
        for name, store in stores.items()
    }


def default_cache_dir() -> Path:
    env = os.environ.get("LLMHOST_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmhost"


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key."""


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"{source}: `{key}`: {e['msg']}")
    return "\n".join(lines)


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's TOML, with the built-in models kept available unless the file redefines them."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: config file not found (set --config / LLMHOST_CONFIG to an existing file)"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    models = data.get("models")
    if isinstance(models, dict):
        data["models"] = {**{name: {} for name in BUILTIN_MODELS}, **models}
    return data


ConfigModel = TypeVar("ConfigModel", bound=BaseModel)


def read_config(path: Path, model: type[ConfigModel]) -> ConfigModel:
    """A TOML config file validated as `model`; errors name the file and the key."""
    try:
        return model.model_validate(read_toml(path))
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path))) from None


def _relative_to(model: ModelConfig, base: Path) -> ModelConfig:
    update = {
        key: base / value
        for key in ("path", "chat_template_file")
        if isinstance(value := getattr(model, key), Path) and not value.is_absolute()
    }
    return model.model_copy(update=update) if update else model


def load_config(path: Path | str) -> HostConfig:
    """Read a TOML config; the default model stays available unless the file redefines it."""
    path = Path(path)
    config = read_config(path, HostConfig)
    # Relative model paths are relative to the config file, as a user reading the file expects.
    fixed = {name: _relative_to(m, path.parent) for name, m in config.models.items()}
    update: dict[str, Any] = {"models": fixed, "key_value": stores_relative_to(config.key_value, path.parent)}
    if not config.data_dir.is_absolute():
        update["data_dir"] = path.parent / config.data_dir
    return config.model_copy(update=update)
