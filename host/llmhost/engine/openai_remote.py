"""The remote backend: a model served by OpenAI-compatible servers (vLLM, SGLang, llama.cpp's server,
llama-cpp-python's server, another llmhost), with the same WIT semantics as a local model (docs/scale-out.md).

What stays here, whatever the server does:
- Stops: the streamed text goes through our own `GenerationText` (earliest-starting stop wins, across chunk
  boundaries, never returned); the request is closed the moment the result is certain. The server's `stop` is
  never sent: servers that check stops in list order (llama-cpp-python) or end a stop and end-of-generation
  alike would change the text or the token counts.
- Usage: the server's `usage` (asked for with `stream_options.include_usage`) when the stream ran to its end and
  the server sent one; otherwise counted here, one token per streamed chunk (how these servers stream without
  `stop`), plus the end-of-generation token on a natural `stop`, as the local backend counts.
- Sequences: the token ids live here; a generation sends them as the prompt where the server takes token ids
  (`token-prompts`), else the sequence's text. The generated text is re-tokenized into ids afterwards.

Requests run on the caller's thread with the official `openai` client (its SSE parsing, errors and timeouts);
a model's requests in flight are bounded by `models.NAME.slots`, never serialized behind one lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import policy
from ..config import ModelConfig
from ..types import (
    BeamParams,
    Constraint,
    EmbeddingsResult,
    EngineError,
    FinishReason,
    InferenceResult,
    InferencingParams,
    InvalidInput,
    LlmError,
    ModelInfo,
    ModelNotSupported,
    StreamChunk,
    StreamDone,
    StreamEvent,
    Usage,
)
from .base import Generation, collect
from .generation import GenerationText
from .sequence_state import attribute_text

if TYPE_CHECKING:
    from ..chat.template import TemplateInfo
    from .llama_vocab import LlamaVocab

log = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({429, 502, 503, 504})  # overloaded or restarting: worth another try (elsewhere)
_MAX_BACKOFF_S = 2.0


@dataclass(frozen=True)
class ServerKind:
    """What one kind of server accepts beyond the plain OpenAI completions API."""

    tokenize_path: str | None = None  # its tokenize endpoint, from the server root (not under /v1)
    tokenize_field: str = "prompt"
    token_prompts: bool = False  # takes a list of token ids as `prompt`
    repeat_field: str | None = None  # its multiplicative repeat penalty, if any
    top_k: bool = False
    min_p: bool = False  # has a min-p sampler on by default, which ours does not use: sent as 0
    constraints: frozenset[str] = frozenset()  # constraint kinds it can enforce


_ALL = frozenset({"json-schema", "json-object", "regex", "grammar", "choice"})
_GBNF_AND_JSON = frozenset({"json-schema", "json-object", "grammar", "choice"})  # no regex in llama.cpp grammars
SERVERS: dict[str, ServerKind] = {
    "generic": ServerKind(),
    "vllm": ServerKind("/tokenize", "prompt", True, "repetition_penalty", True, True, _ALL),
    # SGLang: no tokenize endpoint relied on (versions differ); its sampling params take regex / json_schema / ebnf.
    "sglang": ServerKind(None, "prompt", True, "repetition_penalty", True, True, _ALL),
    "llama-cpp-server": ServerKind("/tokenize", "content", True, "repeat_penalty", True, True, _GBNF_AND_JSON),
    "llama-cpp-python": ServerKind("/extras/tokenize", "input", False, "repeat_penalty", True, True, _GBNF_AND_JSON),
    # llmhost's guest-examples/openai-compat: plain OpenAI fields (it runs with repeat penalty 1 and no top-k).
    "llmhost": ServerKind(),
}


def _gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def constraint_fields(server: str, constraint: Constraint) -> dict[str, Any]:
    """The request fields that make `server` enforce `constraint` (the caller checked it supports the kind)."""
    import json

    kind, text = constraint.kind, constraint.text
    if server == "vllm":
        if kind == "json-schema":
            return {"structured_outputs": {"json": _json_or_invalid(text)}}
        fields: dict[str, dict[str, Any]] = {
            "json-object": {"json_object": True},
            "regex": {"regex": text},
            "grammar": {"grammar": text},
            "choice": {"choice": list(constraint.options)},
        }
        return {"structured_outputs": fields[kind]}
    if server == "sglang":
        if kind == "json-schema":
            return {"json_schema": text}
        if kind == "json-object":
            return {"json_schema": json.dumps({"type": "object"})}
        if kind == "regex":
            return {"regex": text}
        if kind == "grammar":
            return {"ebnf": text}
        import re

        return {"regex": "(" + "|".join(re.escape(o) for o in constraint.options) + ")"}
    if kind == "choice":
        return {"grammar": "root ::= " + " | ".join(_gbnf_literal(o) for o in constraint.options)}
    if kind == "grammar":
        return {"grammar": text}
    if server == "llama-cpp-server":
        return {"json_schema": _json_or_invalid(text) if kind == "json-schema" else {"type": "object"}}
    # llama-cpp-python's completions take only GBNF: its own converter turns the schema into one (lazy import:
    # it loads llama.cpp's library, which a host with only remote models may never need otherwise).
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if kind == "json-object":
        return {"grammar": JSON_GBNF}
    _json_or_invalid(text)
    return {"grammar": json_schema_to_gbnf(text)}


def _json_or_invalid(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"constraint json-schema is not valid JSON: {e}") from None


class RemoteModel:
    """One configured remote model: its clients (one per base URL), its tokenizer and its in-flight bound."""

    def __init__(self, name: str, config: ModelConfig, cache_dir: Path) -> None:
        import openai

        self.name = name
        self.config = config
        self.kind = SERVERS[config.server]
        self.remote_name = config.remote_model or name
        self.token_prompts = self.kind.token_prompts if config.token_prompts is None else config.token_prompts
        self.urls = [u.rstrip("/") for u in config.base_urls]
        key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        if config.api_key_env and not key:
            log.warning("models.%s.api-key-env names %s, which is not set", name, config.api_key_env)
        timeout = openai.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        # Retries are ours (on the next base URL, with our backoff): the client's own are off.
        self.clients = [
            openai.OpenAI(base_url=url, api_key=key or "none", timeout=timeout, max_retries=0) for url in self.urls
        ]
        self._key = key  # sent as a bearer token by the clients; never logged or put in a message
        self._next = itertools.count()
        self._inflight = threading.BoundedSemaphore(config.slots)
        self.cache_dir = cache_dir
        self._vocab: LlamaVocab | None = None
        self._vocab_lock = threading.Lock()
        self._http: Any = None

    # --- requests ----------------------------------------------------------------------------------------
    def acquire(self) -> None:
        if not self._inflight.acquire(timeout=policy.SLOT_WAIT_TIMEOUT_S):
            raise EngineError(
                f"model {self.name!r} had {self.config.slots} requests in flight for "
                f"{policy.SLOT_WAIT_TIMEOUT_S:.0f} s (raise `models.{self.name}.slots`)"
            )

    def release(self) -> None:
        self._inflight.release()

    def call(self, what: str, request: Callable[[Any], Any]) -> tuple[str, Any]:
        """Run `request(client)` against the base URLs: round-robin start; 429/5xx-busy retried with backoff on
        the next URL; a refused connection tried once per URL. Returns (url, response)."""
        import openai

        start = next(self._next)
        n = len(self.clients)
        unreachable: set[int] = set()
        attempt = 0
        while True:
            index = (start + attempt) % n
            url = self.urls[index]
            try:
                return url, request(self.clients[index])
            except openai.APIStatusError as e:
                if e.status_code in _RETRY_STATUS and attempt < self.config.retries:
                    time.sleep(_backoff(attempt, e.response.headers.get("retry-after")))
                    attempt += 1
                    continue
                detail = _error_detail(e)
                if e.status_code in _RETRY_STATUS:
                    raise EngineError(
                        f"{url} answered {e.status_code} to {what} after {attempt + 1} attempts: {detail} "
                        f"(raise `models.{self.name}.retries` or add servers to `models.{self.name}.base-urls`)"
                    ) from None
                if e.status_code in (401, 403):
                    env = self.config.api_key_env
                    hint = f"the key in ${env}" if env else f"no key: set `models.{self.name}.api-key-env`"
                    raise EngineError(f"{url} refused {what} ({e.status_code}, {hint})") from None
                if 400 <= e.status_code < 500:
                    raise InvalidInput(f"{url} refused {what} ({e.status_code}): {detail}") from None
                raise EngineError(f"{url} failed {what} ({e.status_code}): {detail}") from None
            except openai.APIConnectionError as e:
                unreachable.add(index)
                if len(unreachable) < n and attempt < self.config.retries + n:
                    attempt += 1
                    continue
                why = "timed out" if isinstance(e, openai.APITimeoutError) else f"{_cause(e)}"
                raise EngineError(
                    f"cannot reach the server for model {self.name!r} at {url}: {why} "
                    f"(check `models.{self.name}.base-urls`)"
                ) from None

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST to an endpoint outside /v1 (tokenize), with the same timeouts and key."""
        import httpx

        with self._vocab_lock:
            if self._http is None:
                headers = {"authorization": f"Bearer {self._key}"} if self._key else {}
                timeout = httpx.Timeout(self.config.read_timeout_s, connect=self.config.connect_timeout_s)
                self._http = httpx.Client(timeout=timeout, headers=headers)
            http = self._http
        index = next(self._next) % len(self.urls)
        root = self.urls[index].removesuffix("/v1")
        try:
            response = http.post(root + path, json=body)
        except httpx.HTTPError as e:
            raise EngineError(
                f"cannot reach the server for model {self.name!r} at {root}{path}: {e} "
                f"(check `models.{self.name}.base-urls`)"
            ) from None
        if response.status_code != 200:
            raise EngineError(f"{root}{path} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    # --- vocabulary --------------------------------------------------------------------------------------
    def vocab(self) -> LlamaVocab | None:
        """The model file's vocabulary, loaded here when the file is known (`path`, or the embedded default)."""
        if self.config.path is None and self.name != policy.DEFAULT_MODEL:
            return None
        with self._vocab_lock:
            if self._vocab is None:
                from .llama_vocab import LlamaVocab
                from .models import resolve_model_path

                self._vocab = LlamaVocab(resolve_model_path(self.name, self.config, self.cache_dir), self.name)
            return self._vocab

    def check_length(self, what: str, text: str, room: int) -> None:
        """Refuse a text too long for `room` tokens before tokenizing it (or sending it anywhere)."""
        vocab = self.vocab()
        per_token = vocab.max_token_bytes() if vocab is not None else policy.MAX_BYTES_PER_TOKEN
        policy.check_text_length(what, len(text), room, self.config.context_length, per_token)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        vocab = self.vocab()
        if vocab is not None:
            return vocab.tokenize(text, add_special)
        if self.kind.tokenize_path is None:
            raise InvalidInput(
                f"model {self.name!r} runs on a {self.config.server} server, which has no tokenize endpoint: set "
                f"`models.{self.name}.path` to the model's GGUF file to tokenize here"
            )
        body: dict[str, Any] = {self.kind.tokenize_field: text}
        if self.config.server == "vllm":
            body.update(model=self.remote_name, add_special_tokens=add_special)
        elif self.config.server == "llama-cpp-server":
            body.update(add_special=add_special, parse_special=True)
        tokens = self.post_json(self.kind.tokenize_path, body).get("tokens")
        if not isinstance(tokens, list):
            raise EngineError(f"the tokenize endpoint of model {self.name!r} returned no token list")
        if self.config.server == "llama-cpp-python" and not add_special and tokens[:1] == self.tokenize("")[:1]:
            tokens = tokens[1:]  # its endpoint always adds the beginning-of-sequence token
        return [int(t) for t in tokens]

    def texts_of(self, tokens: list[int], text: str) -> list[str]:
        """The text each token stands for (exact with a local vocabulary; else all of it on the last token)."""
        vocab = self.vocab()
        if vocab is None:
            return attribute_text([b""] * len(tokens), text) if tokens else []
        return attribute_text([vocab.piece(t) for t in tokens], text)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        if self._http is not None:
            self._http.close()
        if self._vocab is not None:
            self._vocab.close()

    # --- generation --------------------------------------------------------------------------------------
    def request_body(self, prompt: str | list[int], prompt_tokens: int, params: InferencingParams) -> dict[str, Any]:
        """The completions request for `params`; `invalid-input` naming what this server cannot do."""
        kind, server = self.kind, self.config.server
        if params.logprobs is not None:
            raise InvalidInput(
                f"logprobs are not available for model {self.name!r} (backend openai): OpenAI-compatible "
                "completions report token strings, not the token ids the WIT returns"
            )
        constraint = params.constraint
        if constraint is not None and constraint.kind not in kind.constraints:
            raise InvalidInput(
                f"model {self.name!r} runs on a {server} server, which cannot enforce a {constraint.kind} constraint "
                f"(set `models.{self.name}.server` if it is another kind of server)"
            )
        lark = constraint is not None and constraint.kind == "grammar" and constraint.text.lstrip().startswith("%llg")
        if lark and server != "vllm":
            # Lark grammars are llguidance's; these servers parse GBNF / EBNF and would fail mid-stream.
            raise InvalidInput(
                f"model {self.name!r} runs on a {server} server, which takes GBNF/EBNF grammars, not a "
                "%llguidance (Lark) grammar such as chat tool calls use (use a vllm server with the guidance "
                "backend, or a local model)"
            )
        max_tokens = params.max_tokens
        room = self.config.context_length - prompt_tokens
        # No limit means "until the context is full", as locally: say so, since servers default to 16 or so.
        max_tokens = room if max_tokens is None else min(max_tokens, room)
        body: dict[str, Any] = {
            "model": self.remote_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.frequency_penalty:
            body["frequency_penalty"] = params.frequency_penalty
        if params.presence_penalty:
            body["presence_penalty"] = params.presence_penalty
        if params.logit_bias:
            body["logit_bias"] = {str(b.token_id): b.bias for b in params.logit_bias}
        extra: dict[str, Any] = {}
        if kind.top_k:
            extra["top_k"] = params.top_k
        if kind.min_p:
            extra["min_p"] = 0.0
        if kind.repeat_field is not None:
            extra[kind.repeat_field] = params.repeat_penalty
            if server in ("llama-cpp-server",):
                extra["repeat_last_n"] = params.repeat_penalty_last_n_token_count
        if constraint is not None:
            extra.update(constraint_fields(server, constraint))
        body["extra_body"] = extra
        return body


def _backoff(attempt: int, retry_after: str | None) -> float:
    try:
        if retry_after is not None:
            return min(float(retry_after), _MAX_BACKOFF_S)
    except ValueError:
        pass
    return min(_MAX_BACKOFF_S, 0.05 * 2**attempt) * (0.5 + random.random() / 2)


def _error_detail(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body
        return str(message)[:300]
    return str(getattr(e, "message", e))[:300]


def _cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return str(e) or type(e).__name__


class RemoteGeneration:
    """One streamed completion. The request starts on the first `next()` (so admission bounds it) and is closed
    as soon as the result is certain, on `close()` (from any thread: cancellation, deadline), or on an error."""

    def __init__(
        self,
        model: RemoteModel,
        body: dict[str, Any],
        state: GenerationText,
        on_end: Callable[[RemoteGeneration], None] | None = None,
    ) -> None:
        self._model = model
        self._body = body
        self.state = state
        self._on_end = on_end
        self._lock = threading.Lock()
        self._stream: Any = None
        self._chunks: Iterator[Any] | None = None
        self._url = ""
        self._holds_slot = False
        self._closed = False
        self._finished = False  # the done event was returned
        self._done: StreamDone | None = None
        self.server_usage: Any = None
        self.cached_tokens: int | None = None
        self.read_to_end = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._finished or self._closed:
            raise StopIteration
        try:
            if self._chunks is None:
                self._start()
            while self._done is None:
                event = self._step()
                if event is not None:
                    return event
        except LlmError:
            self.close()
            raise
        self._finished = True
        self.close()
        return self._done

    def _start(self) -> None:
        self._model.acquire()
        self._holds_slot = True
        body = dict(self._body)
        url, stream = self._model.call("the completion request", lambda client: client.completions.create(**body))
        with self._lock:
            self._url, self._stream = url, stream
            if self._closed:  # closed while connecting
                stream.close()
                raise StopIteration
        self._chunks = iter(stream)

    def _step(self) -> StreamEvent | None:
        """Read one chunk; returns the event it makes certain, if any (`_done` is set when it ends)."""
        assert self._chunks is not None
        state = self.state
        try:
            chunk = next(self._chunks)
        except StopIteration:
            if state.finish_reason is None:
                raise EngineError(
                    f"the stream from {self._url} was cut mid-way: it ended before a finish reason"
                ) from None
            self.read_to_end = True
            self._finish_done()
            return None
        except LlmError:
            raise
        except Exception as e:  # noqa: BLE001 - any transport failure mid-stream ends the generation
            if self._closed:
                raise StopIteration from None
            raise EngineError(f"the stream from {self._url} was cut mid-way: {_cause(e) or type(e).__name__}") from None
        if getattr(chunk, "usage", None) is not None:
            self.server_usage = chunk.usage
            details = getattr(chunk.usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
            self.cached_tokens = int(cached) if cached is not None else None
        if state.finish_reason is not None or not chunk.choices:
            return None  # the finish came already: only usage may follow
        choice = chunk.choices[0]
        event: StreamEvent | None = None
        if choice.text:
            used = state.prompt_token_count + len(state.token_ids) + 1
            step = state.on_token(
                0, choice.text.encode(), end_of_generation=False, context_full=used >= self._model.config.context_length
            )
            event = _without_ids(step.chunk)
            if step.finish is not None and state.stopped_by_sequence:
                # Certain now, and the server would go on: close the request at once (usage counted here).
                self._finish_done()
                return event
            if step.finish is not None:
                # The token budget (or the context) is spent: the server, given the same limit, ends right
                # after this, so its final chunks are read for its usage.
                return event
        if choice.finish_reason is not None:
            if choice.finish_reason == "length":
                step = state.end(FinishReason.LENGTH)
            else:  # "stop": end-of-generation (we never send stop strings), whose token counts as generated
                step = state.on_token(0, b"", end_of_generation=True, context_full=False)
            late = _without_ids(step.chunk)
            if isinstance(event, StreamChunk) and late is not None:
                event = event.model_copy(update={"text": event.text + late.text, "usage": late.usage})
            else:
                event = event or late
        return event

    def _finish_done(self) -> None:
        state = self.state
        usage = state.usage
        server = self.server_usage
        if self.read_to_end and server is not None:
            usage = Usage(
                prompt_token_count=int(server.prompt_tokens), generated_token_count=int(server.completion_tokens)
            )
        assert state.finish_reason is not None
        self._done = StreamDone(finish_reason=state.finish_reason, usage=usage)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                stream.close()  # closes the connection: the server cancels the request
        if self._holds_slot:
            self._holds_slot = False
            self._model.release()
        if self._on_end is not None:
            self._on_end(self)

    interrupt = close  # serve's scope calls this to cancel from another thread while a step waits on the network


def _without_ids(chunk: Any) -> Any:
    """Remote chunks carry no token ids (the completions stream reports text only)."""
    return None if chunk is None else chunk.model_copy(update={"token_ids": ()})


class RemoteSequence:
    """A guest's sequence of a remote model: the ids and texts are kept here; every generation sends the whole
    sequence (as ids with `token-prompts`, else as text), and the server's prefix cache serves the reuse."""

    def __init__(self, model: RemoteModel) -> None:
        self._model = model
        self._tokens: list[int] = []
        self._texts: list[str] = []
        self._logprobs: list[float | None] = []
        self._evaluated = 0
        self._busy = False
        self.closed = False

    def text(self) -> str:
        return "".join(self._texts)

    def token_ids(self) -> list[int]:
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def logprobs(self) -> list[float | None]:
        return list(self._logprobs)

    def log_likelihood(self) -> float:
        return 0.0  # no generated token has a log-probability (logprobs are not mapped for remote models)

    def evaluated_token_count(self) -> int:
        return self._evaluated

    def append(self, text: str) -> None:
        self._check_idle()
        if not text:
            return
        self._model.check_length("the appended text", text, self._model.config.context_length - len(self._tokens))
        tokens = self._model.tokenize(text, add_special=not self._tokens)
        self._add(tokens, self._model.texts_of(tokens, text))

    def append_tokens(self, tokens: list[int]) -> None:
        self._check_idle()
        vocab = self._model.vocab()
        if vocab is None:
            raise InvalidInput(
                f"append-tokens on model {self._model.name!r} needs its vocabulary here: set "
                f"`models.{self._model.name}.path` to the model's GGUF file"
            )
        for i, tok in enumerate(tokens):
            if not 0 <= tok < vocab.n_vocab:
                raise InvalidInput(f"tokens[{i}] = {tok} is not a token of {self._model.name}")
        pieces = [vocab.piece(t) for t in tokens]
        self._add(tokens, attribute_text(pieces, b"".join(pieces).decode("utf-8", "ignore")))

    def _add(self, tokens: list[int], texts: list[str]) -> None:
        limit = self._model.config.context_length
        if len(self._tokens) + len(tokens) > limit:
            raise InvalidInput(
                f"appending {len(tokens)} tokens to a sequence of {len(self._tokens)} would exceed the context "
                f"window of {limit} tokens (raise `models.{self._model.name}.context-length` or truncate first)"
            )
        self._tokens.extend(tokens)
        self._texts.extend(texts)
        self._logprobs.extend([None] * len(tokens))

    def generate_stream(self, params: InferencingParams) -> Generation:
        self._check_idle()
        if not self._tokens:
            raise InvalidInput("the sequence is empty: append a prompt before generating")
        model = self._model
        count = len(self._tokens)
        prompt: str | list[int] = list(self._tokens) if model.token_prompts else self.text()
        # A full context ends at once with `length` and no tokens, as locally.
        body = None if count >= model.config.context_length else model.request_body(prompt, count, params)
        state = GenerationText(params.stop, count, params.max_tokens)
        self._busy = True
        if body is None:
            return _FullGeneration(state, self._ended)
        return RemoteGeneration(model, body, state, on_end=self._ended)

    def _ended(self, generation: Any) -> None:
        state: GenerationText = generation.state
        try:
            returned = state.text
            if returned:
                tokens = self._model.tokenize(returned, add_special=False)
                texts = self._model.texts_of(tokens, returned)
                self._tokens.extend(tokens)
                self._texts.extend(texts)
                self._logprobs.extend([None] * len(tokens))
            # What the server ran: the prompt less what it said came from its cache, plus the generated tokens.
            sent = state.prompt_token_count
            cached = getattr(generation, "cached_tokens", None) or 0
            self._evaluated += max(0, sent - cached) + len(state.token_ids)
        finally:
            self._busy = False

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def truncate(self, count: int) -> None:
        self._check_idle()
        if count > len(self._tokens):
            raise InvalidInput(f"token-count {count} is longer than the sequence ({len(self._tokens)} tokens)")
        del self._tokens[count:], self._texts[count:], self._logprobs[count:]

    def fork(self) -> RemoteSequence:
        self._check_idle()
        copy = RemoteSequence(self._model)
        copy._tokens, copy._texts, copy._logprobs = list(self._tokens), list(self._texts), list(self._logprobs)
        return copy

    def score(self, continuations: list[str]) -> list[float]:
        raise InvalidInput(
            f"sequence.score needs the model's raw distribution at every position; the remote model "
            f'{self._model.name!r} (backend "openai") does not expose it: score on a local (llama-cpp) model'
        )

    def beam_search(self, params: BeamParams, check: Callable[[], None] | None = None) -> list[tuple[Any, float]]:
        raise InvalidInput(
            f"sequence.beam-search decodes forks of one KV cache step by step; the remote model "
            f'{self._model.name!r} (backend "openai") cannot: search on a local (llama-cpp) model'
        )

    def host_bytes(self) -> int:
        """Host memory it holds: no KV state here (that lives on the servers), only its ids and texts."""
        return 8 * len(self._tokens) + sum(len(t) for t in self._texts)

    def close(self) -> None:
        self.closed = True

    def _check_idle(self) -> None:
        if self.closed:
            raise InvalidInput("the sequence was closed")
        if self._busy:
            raise InvalidInput("the sequence is generating: finish or drop its stream first")


class _FullGeneration:
    """A generation on a sequence whose context is already full: `length` with no tokens, no request."""

    def __init__(self, state: GenerationText, on_end: Callable[[Any], None]) -> None:
        self.state = state
        self._on_end = on_end
        self._done = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._done:
            raise StopIteration
        self.state.end(FinishReason.LENGTH)
        self.close()
        return StreamDone(finish_reason=FinishReason.LENGTH, usage=self.state.usage)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._on_end(self)


class OpenAIEngine:
    """Every model configured with `backend = "openai"`."""

    def __init__(
        self, models: Mapping[str, ModelConfig], cache_dir: Path, note: Callable[[str], None] | None = None
    ) -> None:
        self._configs = dict(models)
        self._cache_dir = cache_dir
        self._models: dict[str, RemoteModel] = {}
        self._lock = threading.Lock()

    def model_names(self) -> list[str]:
        return list(self._configs)

    def model(self, name: str) -> RemoteModel:
        config = self._configs.get(name)
        if config is None:
            raise ModelNotSupported(
                f"model {name!r} is not configured; known models: {', '.join(self._configs)} "
                "(add it under [models] in the config)"
            )
        with self._lock:
            m = self._models.get(name)
            if m is None:
                m = self._models[name] = RemoteModel(name, config, self._cache_dir)
            return m

    def list_models(self) -> list[ModelInfo]:
        return [ModelInfo(name=n, context_length=c.context_length, vocab_size=0) for n, c in self._configs.items()]

    def model_info(self, model: str) -> ModelInfo:
        m = self.model(model)
        vocab = m.vocab()
        return ModelInfo(name=model, context_length=m.config.context_length, vocab_size=vocab.n_vocab if vocab else 0)

    def tokenize(self, model: str, text: str) -> list[int]:
        policy.check_tokenize_length(text)
        return self.model(model).tokenize(text)

    def chat_template(self, model: str) -> TemplateInfo:
        """As a local model's: the config's template, else the model file's (its vocabulary-only load, when the
        file is known here), else the built-in one of the default model. Chats are rendered here and sent as
        completions, so stops, usage and constrained tool calls keep their local semantics."""
        from ..chat.template import GEMMA3_TEMPLATE, TemplateInfo, template_source

        m = self.model(model)
        vocab = m.vocab()
        found = vocab.chat_template() if vocab is not None else TemplateInfo(source="", origin="")
        # As for a local model: the built-in template is the embedded default model's (no `path`), whose GGUF has none.
        builtin = GEMMA3_TEMPLATE if m.config.path is None and model == policy.DEFAULT_MODEL else None
        source, origin = template_source(
            model, m.config.chat_template, m.config.chat_template_file, found.source or None, builtin
        )
        return dataclasses.replace(found, source=source, origin=origin)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> RemoteGeneration:
        m = self.model(model)
        m.check_length("prompt", prompt, m.config.context_length)
        count = len(m.tokenize(prompt))
        if count == 0:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        policy.check_prompt_fits(count, m.config.context_length)
        body = m.request_body(prompt, count, params)
        return RemoteGeneration(m, body, GenerationText(params.stop, count, params.max_tokens))

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(self, model: str, texts: list[str], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        """One request for all texts (`check` runs before it: the server does the work in one piece)."""
        if check is not None:
            check()
        m = self.model(model)
        for i, text in enumerate(texts):
            m.check_length(f"text[{i}]", text, m.config.context_length)
        _, response = m.call(
            "the embeddings request",
            lambda client: client.embeddings.create(model=m.remote_name, input=texts, encoding_format="float"),
        )
        vectors = [list(map(float, item.embedding)) for item in sorted(response.data, key=lambda d: d.index)]
        usage = getattr(response, "usage", None)
        count = int(usage.prompt_tokens) if usage is not None else 0
        return EmbeddingsResult(embeddings=vectors, prompt_token_count=count)

    def open_sequence(self, model: str) -> RemoteSequence:
        return RemoteSequence(self.model(model))

    def close(self) -> None:
        with self._lock:
            for m in self._models.values():
                m.close()
            self._models.clear()
