"""`llmhost run --connect URL`: run a component here against the models a running `llmhost serve` lends.

The server is any llmhost serving an OpenAI-compatible app (guest-examples/openai-compat, server kind "llmhost").
Every model it lists at `/v1/models` becomes a remote model of this host (`backend = "openai"`), and nothing
else: no model is loaded in this process, so a run starts generating as soon as the component is instantiated
(the server's model is already warm). Generation, stops, usage, chat, embeddings and sequences keep their local
semantics (engine/remote/); what a completions API cannot carry is `invalid-input` (docs/cli.md, "A warm model for
`llmhost run`").

What the listing does not say comes from this host's own config when it has a model of the same name: its file
(`path`, for tokenizing here and the chat template), `context-length`, chat template, aliases.
"""

from __future__ import annotations

import os
import time
from typing import Any

from llmhost.config import ConfigError, HostConfig, ModelConfig
from llmhost.domain.redaction import scrub_credentials
from llmhost.engine.remote.bounds import MAX_LISTING_BYTES, BodyTooLarge, TimeUp, read_capped

# A bearer key for a server started with LLMHOST_API_KEYS: read from this variable, never from the command line.
CONNECT_KEY_ENV = "LLMHOST_CONNECT_API_KEY"
_LIST_TIMEOUT_S = 10.0  # the whole listing, however the server drips it
# What a model of the local config says about the model itself (the server's copy is the same file); the rest of
# its table (threads, slots, batch size, ...) is about running it, which the server does.
_MODEL_FIELDS = ("path", "context_length", "chat_template", "chat_template_file", "aliases", "pooling")


def api_base(url: str) -> str:
    """The server's OpenAI API root: URL itself when it ends in /v1, else URL/v1."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--connect {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8080)")
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def lent_models(config: HostConfig, url: str) -> HostConfig:
    """`config` whose models are exactly those the server at `url` lists, each run there (`ConfigError` naming the
    fix when the server cannot be asked or lists none)."""
    base = api_base(url)
    listed = _listed_models(base)
    if not listed:
        raise ConfigError(f"the server at {base} lists no model at /v1/models (is a model allowed to its app?)")
    models = {name: _remote_model(name, kind, base, config.models.get(name)) for name, kind in listed}
    return config.model_copy(update={"models": models})


def _listed_models(base: str) -> list[tuple[str, str | None]]:
    """(name, kind) of each model at BASE/models, in the server's order: read within _LIST_TIMEOUT_S in all and
    MAX_LISTING_BYTES at most, whatever the server sends."""
    import json

    import httpx

    key = os.environ.get(CONNECT_KEY_ENV, "")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    headers["accept-encoding"] = "identity"  # the body is capped as sent, not once inflated
    hint = "start one with `llmhost serve openai-compat.wasm` (docs/cli.md: A warm model for `llmhost run`)"
    ends = time.monotonic() + _LIST_TIMEOUT_S
    content = b""
    try:
        with httpx.stream(
            "GET", base + "/models", headers=headers, timeout=httpx.Timeout(_LIST_TIMEOUT_S, connect=5.0)
        ) as response:
            status = response.status_code
            if status == 200:
                content = read_capped(response, ends, MAX_LISTING_BYTES)
    except TimeUp:
        raise ConfigError(
            f"--connect: GET {base}/models did not complete within {_LIST_TIMEOUT_S:g} s; {hint}"
        ) from None
    except BodyTooLarge:
        raise ConfigError(
            f"--connect: GET {base}/models answered more than {MAX_LISTING_BYTES:,} bytes: not an llmhost model list"
        ) from None
    except httpx.HTTPError as e:
        why = scrub_credentials(str(e) or type(e).__name__, [key] if key else [])
        raise ConfigError(f"--connect: cannot reach an llmhost server at {base}: {why}; {hint}") from None
    if status == 401:
        raise ConfigError(f"--connect: {base} wants an API key: set ${CONNECT_KEY_ENV} to one of the server's keys")
    try:
        body: Any = json.loads(content) if status == 200 else None
        data = body["data"]
        listed = [(str(m["id"]), m.get("kind") if isinstance(m.get("kind"), str) else None) for m in data]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            f"--connect: GET {base}/models answered {status} without an OpenAI model list: is it an "
            f"llmhost server with an OpenAI-compatible app? {hint}"
        ) from None
    return listed


def _remote_model(name: str, kind: str | None, base: str, local: ModelConfig | None) -> ModelConfig:
    fields: dict[str, Any] = {"backend": "openai", "base_urls": (base,), "server": "llmhost", "remote_model": name}
    if os.environ.get(CONNECT_KEY_ENV):
        fields["api_key_env"] = CONNECT_KEY_ENV
    if local is not None:
        fields.update((field, getattr(local, field)) for field in _MODEL_FIELDS if field in local.model_fields_set)
        if local.hf_repo is not None:  # the Hub's cached file, when it is here, is the model's vocabulary
            from llmhost.engine.hub import model_file

            fields["path"] = model_file(local)
    if kind in ("base", "instruct", "embedding"):
        fields["kind"] = kind
    return ModelConfig(**fields)
