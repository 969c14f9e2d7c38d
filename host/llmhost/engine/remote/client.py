"""One remote model's HTTP side: the official client, its servers in turn, retries with backoff, the bounded
requests in flight."""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.limits import BUILTIN_MODELS, MAX_BYTES_PER_TOKEN, model_key
from llmhost.domain.redaction import scrub_credentials
from llmhost.domain.types import InferencingParams, check_text_length
from llmhost.engine.admission import AdmissionQueue
from llmhost.engine.remote.bounds import (
    MAX_ERROR_BODY_BYTES,
    MAX_JSON_BODY_BYTES,
    BodyTooLarge,
    TimeUp,
    call_ends,
    read_capped,
    read_head,
)
from llmhost.engine.remote.servers import SERVERS, constraint_fields
from llmhost.engine.text import attribute_text

if TYPE_CHECKING:
    from llmhost.engine.local.vocab import LlamaVocab

log = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({429, 502, 503, 504})  # overloaded or restarting: worth another try (elsewhere)
_MAX_BACKOFF_S = 2.0
_MAX_TOKEN_ID = 2**31  # a token id is an s32 to llama.cpp
_MAX_SENT_STOPS = 4  # OpenAI's limit, which openai-compat keeps (more are matched here alone)
_MAX_DETAIL_CHARS = 300  # of a server's error message, quoted in ours
# When the request being sent must end (`call`): its response hook reads a body read whole by then.
_REQUEST_ENDS: ContextVar[float | None] = ContextVar("llmhost_remote_request_ends", default=None)


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
            openai.OpenAI(
                base_url=url,
                api_key=key or "none",
                timeout=timeout,
                max_retries=0,
                http_client=openai.DefaultHttpxClient(event_hooks={"response": [self._on_response]}),
            )
            for url in self.urls
        ]
        self._key = key  # sent as a bearer token by the clients; never logged or put in a message
        self._next = itertools.count()
        # Requests in flight, bounded by `slots`: callers wait in the same FIFO type as a local model's work.
        self._inflight = 0
        self.admission = AdmissionQueue(
            threading.RLock(), f"all {config.slots} requests in flight of {name}", model_key(name, "slots")
        )
        self.cache_dir = cache_dir
        self._vocab: LlamaVocab | None = None
        self._vocab_lock = threading.Lock()
        self._server_counts = True  # the server's tokenize endpoint counts prompts (`counts_prompts`) and answers
        self._http: Any = None

    # --- requests ----------------------------------------------------------------------------------------
    def acquire(self, check: Callable[[], None] | None = None) -> None:
        """Wait in turn for one of the model's requests in flight."""
        self.admission.enter("request", self._take, check)

    def _take(self) -> bool:
        if self._inflight >= self.config.slots:
            return False
        self._inflight += 1
        return True

    def release(self) -> None:
        with self.admission.lock:
            self._inflight -= 1
        self.admission.changed()

    def call(self, what: str, request: Callable[[Any], Any], ends: tuple[float, bool] | None = None) -> tuple[str, Any]:
        """Run `request(client)` against the base URLs: round-robin start; 429/5xx-busy retried with backoff on
        the next URL; a refused connection tried once per URL. Returns (url, response). The whole call, retries
        included, ends by `ends` (`bounds.call_ends`: the run's deadline, else `read-timeout-s`)."""
        import openai

        until, deadline = ends if ends is not None else call_ends(self.config.read_timeout_s)
        start = next(self._next)
        n = len(self.clients)
        unreachable: set[int] = set()
        attempt = 0
        while True:
            index = (start + attempt) % n
            url = self.urls[index]
            left = until - time.monotonic()
            if left <= 0:
                raise self.timed_out(url, what, deadline)
            # No read (nor the wait for the response's head) outlasts what is left of the call.
            timeout = openai.Timeout(
                min(self.config.read_timeout_s, left), connect=min(self.config.connect_timeout_s, left)
            )
            token = _REQUEST_ENDS.set(until)
            try:
                return url, request(self.clients[index].with_options(timeout=timeout))
            except (TimeUp, BodyTooLarge) as e:
                if isinstance(e, TimeUp):
                    raise self.timed_out(url, what, deadline) from None
                raise EngineError(f"{url} answered {what} with a body over {MAX_JSON_BODY_BYTES:,} bytes") from None
            except openai.APIStatusError as e:
                if e.status_code in _RETRY_STATUS and attempt < self.config.retries:
                    time.sleep(min(_backoff(attempt, e.response.headers.get("retry-after")), max(0.0, left)))
                    attempt += 1
                    continue
                detail = self.scrub(_error_detail(e))
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
                if time.monotonic() >= until:
                    raise self.timed_out(url, what, deadline) from None
                unreachable.add(index)
                if len(unreachable) < n and attempt < self.config.retries + n:
                    attempt += 1
                    continue
                why = "timed out" if isinstance(e, openai.APITimeoutError) else self.scrub(root_cause(e))
                raise EngineError(
                    f"cannot reach the server for model {self.name!r} at {url}: {why} "
                    f"(check `models.{self.name}.base-urls`)"
                ) from None
            finally:
                _REQUEST_ENDS.reset(token)

    def timed_out(self, url: str, what: str, deadline: bool) -> EngineError:
        """The error of a call that passed its total bound (`call_ends`)."""
        if deadline:
            return EngineError(f"{url} did not complete {what} before the run's deadline")
        return EngineError(
            f"{url} did not complete {what} within {self.config.read_timeout_s:g} s "
            f"(`models.{self.name}.read-timeout-s` bounds each remote call as a whole)"
        )

    def scrub(self, text: str) -> str:
        """A server's text as our messages may quote it: without the API key or any credential it echoes."""
        return scrub_credentials(text, (self._key, f"Bearer {self._key}") if self._key else ())

    def _on_response(self, response: Any) -> None:
        """The official client's response hook: a body it would read whole (an error's, a JSON answer's) is read
        here, by the call's end and up to a cap (an error's is cut short and scrubbed of credentials)."""
        if response.status_code < 400 and "text/event-stream" in response.headers.get("content-type", ""):
            return  # a stream: RemoteGeneration bounds its reads
        until = _REQUEST_ENDS.get()
        until = until if until is not None else time.monotonic() + self.config.read_timeout_s
        if response.status_code >= 400:
            head = read_head(response, until, MAX_ERROR_BODY_BYTES).decode("utf-8", "replace")
            response._content = self.scrub(head).encode()
        else:
            response._content = read_capped(response, until, MAX_JSON_BODY_BYTES)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST to an endpoint outside /v1 (tokenize), with the same timeouts, key and bound on the whole call."""
        import httpx

        with self._vocab_lock:
            if self._http is None:
                headers = {"authorization": f"Bearer {self._key}"} if self._key else {}
                headers["accept-encoding"] = "identity"  # the body is capped as sent, not once inflated
                self._http = httpx.Client(headers=headers)
            http = self._http
        index = next(self._next) % len(self.urls)
        root = self.urls[index].removesuffix("/v1")
        until, deadline = call_ends(self.config.read_timeout_s)
        left = max(0.001, until - time.monotonic())
        timeout = httpx.Timeout(min(self.config.read_timeout_s, left), connect=min(self.config.connect_timeout_s, left))
        what = f"POST {path}"
        try:
            with http.stream("POST", root + path, json=body, timeout=timeout) as response:
                if response.status_code != 200:
                    head = read_head(response, until, MAX_ERROR_BODY_BYTES).decode("utf-8", "replace")
                    detail = self.scrub(head)[:_MAX_DETAIL_CHARS]
                    raise EngineError(f"{root}{path} answered {response.status_code}: {detail}")
                content = read_capped(response, until, MAX_JSON_BODY_BYTES)
        except TimeUp:
            raise self.timed_out(root, what, deadline) from None
        except BodyTooLarge:
            raise EngineError(f"{root}{path} answered with a body over {MAX_JSON_BODY_BYTES:,} bytes") from None
        except httpx.HTTPError as e:
            if time.monotonic() >= until:
                raise self.timed_out(root, what, deadline) from None
            raise EngineError(
                f"cannot reach the server for model {self.name!r} at {root}{path}: {self.scrub(str(e))} "
                f"(check `models.{self.name}.base-urls`)"
            ) from None
        try:
            return json.loads(content)
        except ValueError:
            raise EngineError(f"{root}{path} answered 200 without a JSON body") from None

    # --- vocabulary --------------------------------------------------------------------------------------
    def vocab(self) -> LlamaVocab | None:
        """The model file's vocabulary, loaded here when the file is known (`path`, or the embedded default)."""
        if self.config.path is None and self.name not in BUILTIN_MODELS:
            return None
        with self._vocab_lock:
            if self._vocab is None:
                from llmhost.engine.local.models import resolve_model_path
                from llmhost.engine.local.vocab import LlamaVocab

                self._vocab = LlamaVocab(resolve_model_path(self.name, self.config, self.cache_dir), self.name)
            return self._vocab

    def _counting_vocab(self) -> LlamaVocab | None:
        """The vocabulary that counts a prompt's tokens: the server's endpoint instead (None) where it counts as the
        host does and nothing loaded the vocabulary yet."""
        return self._vocab if self.kind.counts_prompts and self._server_counts else self.vocab()

    def check_length(self, what: str, text: str, room: int) -> None:
        """Refuse a text too long for `room` tokens before tokenizing it (or sending it anywhere)."""
        vocab = self._counting_vocab()
        per_token = vocab.max_token_bytes() if vocab is not None else MAX_BYTES_PER_TOKEN
        check_text_length(what, len(text), room, self.config.context_length, per_token)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        # Without the beginning-of-sequence token (a sequence's later appends) only the vocabulary tokenizes exactly.
        vocab = self._counting_vocab() if add_special else self.vocab()
        if vocab is not None:
            return vocab.tokenize(text, add_special)
        if self.kind.counts_prompts and add_special and self._server_counts:
            try:
                return self._server_tokens(text, add_special)
            except EngineError:
                if self.vocab() is None:
                    raise
                # An app without the endpoint (openai-compat before it had one): count here from now on.
                self._server_counts = False
                return self.tokenize(text, add_special)
        return self._server_tokens(text, add_special)

    def _server_tokens(self, text: str, add_special: bool) -> list[int]:
        if self.kind.counts_prompts and not add_special:  # its endpoint always adds that token
            raise InvalidInput(
                f"model {self.name!r} runs on a {self.config.server} server, whose tokenize endpoint counts prompts "
                f"only: set `models.{self.name}.path` to the model's GGUF file to tokenize here"
            )
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
        elif self.config.server == "llmhost":
            body["model"] = self.remote_name
        answer = self.post_json(self.kind.tokenize_path, body)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise EngineError(f"the tokenize endpoint of model {self.name!r} returned no token list (`tokens`)")
        for i, t in enumerate(tokens):
            # bool is an int to Python; a token id of another type would fail later, far from the server's fault.
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < _MAX_TOKEN_ID:
                raise EngineError(
                    f"the tokenize endpoint of model {self.name!r} returned `tokens[{i}]` = {str(t)[:40]!r}: not a "
                    "token id"
                )
        if self.config.server == "llama-cpp-python" and not add_special and tokens[:1] == self.tokenize("")[:1]:
            tokens = tokens[1:]  # its endpoint always adds the beginning-of-sequence token
        return list(tokens)

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
        if params.logprobs is not None and not kind.token_logprobs:
            raise InvalidInput(
                f"logprobs are not available for model {self.name!r} (backend openai, a {server} server): its "
                f"completions report token strings, not the token ids the WIT returns ({self.elsewhere()})"
            )
        if params.logprobs is not None and self.vocab() is None:
            raise InvalidInput(
                f"logprobs of model {self.name!r} need its token texts here: set `models.{self.name}.path` to the "
                "model's GGUF file"
            )
        constraint = params.constraint
        if constraint is not None and constraint.kind not in kind.constraints:
            raise InvalidInput(
                f"model {self.name!r} runs on a {server} server, which cannot enforce a {constraint.kind} constraint "
                f"({self.elsewhere()})"
            )
        lark = constraint is not None and constraint.kind == "grammar" and constraint.text.lstrip().startswith("%llg")
        if lark and server not in ("vllm", "llmhost"):
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
            if server in ("llama-cpp-server", "llmhost"):
                extra["repeat_last_n"] = params.repeat_penalty_last_n_token_count
        if constraint is not None:
            extra.update(constraint_fields(server, constraint))
        if kind.ends_as_sent and 0 < len(params.stop) <= _MAX_SENT_STOPS:
            body["stop"] = list(params.stop)  # its host matches stops as ours does: it ends there by itself
        if params.logprobs is not None:  # (token_logprobs) each token by its id, with the host's own values
            body["logprobs"] = params.logprobs
            extra["return_tokens_as_token_ids"] = True
        body["extra_body"] = extra
        return body

    def elsewhere(self) -> str:
        """The fix for what this model's server cannot do: an llmhost server does all a local run does that a
        completions API can carry, so the rest needs a local run; another kind may be misnamed."""
        if self.config.server == "llmhost":
            return "run without `--connect` / `LLMHOST_CONNECT` to load the model here (or use a local model)"
        return f"set `models.{self.name}.server` if it is another kind of server, or use a local model"


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
        return str(message)[:_MAX_DETAIL_CHARS]
    return str(getattr(e, "message", e))[:_MAX_DETAIL_CHARS]


def root_cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return str(e) or type(e).__name__
