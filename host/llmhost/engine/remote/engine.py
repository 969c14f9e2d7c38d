"""The remote backend: a model served by OpenAI-compatible servers (vLLM, SGLang, llama.cpp's server,
llama-cpp-python's server, another llmhost), with the same WIT semantics as a local model (docs/scale-out.md).

What stays here, whatever the server does:
- Stops: the streamed text goes through our own `GenerationText` (earliest-starting stop wins, across chunk
  boundaries, never returned); the request is closed the moment the result is certain. The server's `stop` is
  never sent: servers that check stops in list order (llama-cpp-python) or end a stop and end-of-generation
  alike would change the text or the token counts. An llmhost server (`ends_as_sent`) is the exception: it
  matches stops as we do, so it gets them and ends by itself, and its stream is read to the end.
- Usage: the server's `usage` (asked for with `stream_options.include_usage`) when the stream ran to its end and
  the server sent one; otherwise counted here, one token per streamed chunk (how these servers stream without
  `stop`), plus the end-of-generation token on a natural `stop`, as the local backend counts.
- Sequences: the token ids live here; a generation sends them as the prompt where the server takes token ids
  (`token-prompts`), else the sequence's text. The generated text is re-tokenized into ids afterwards.

Requests run on the caller's thread with the official `openai` client (its SSE parsing, errors and timeouts);
a model's requests in flight are bounded by `models.NAME.slots`, never serialized behind one lock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.limits import DEFAULT_MODEL, REMOTE_EMBEDDING_BATCH
from llmhost.domain.types import (
    EmbeddingInput,
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    ModelInfo,
    check_embedding_texts,
    check_prompt_fits,
    check_tokenize_length,
)
from llmhost.engine.base import Models, collect
from llmhost.engine.chat_template import TemplateInfo, choose_template
from llmhost.engine.generation import GenerationText
from llmhost.engine.remote.client import RemoteModel
from llmhost.engine.remote.generation import RemoteGeneration
from llmhost.engine.remote.sequence import RemoteSequence

log = logging.getLogger(__name__)


class OpenAIEngine:
    """Every model configured with `backend = "openai"`."""

    def __init__(
        self, models: Mapping[str, ModelConfig], cache_dir: Path, note: Callable[[str], None] | None = None
    ) -> None:
        self._models = Models(models, lambda name, config: RemoteModel(name, config, cache_dir))
        self._configs = self._models.configs

    def model_names(self) -> list[str]:
        return list(self._configs)

    def model(self, name: str) -> RemoteModel:
        return self._models.get(name)

    def list_models(self) -> list[ModelInfo]:
        return [ModelInfo(name=n, context_length=c.context_length, vocab_size=0) for n, c in self._configs.items()]

    def model_info(self, model: str) -> ModelInfo:
        m = self.model(model)
        vocab = m.vocab()
        return ModelInfo(name=model, context_length=m.config.context_length, vocab_size=vocab.n_vocab if vocab else 0)

    def tokenize(self, model: str, text: str) -> list[int]:
        check_tokenize_length(text)
        return self.model(model).tokenize(text)

    def chat_template(self, model: str) -> TemplateInfo:
        """As a local model's (the file's template comes from the vocabulary-only load, when the file is known
        here). Chats are rendered here and sent as completions, so stops, usage and constrained tool calls keep
        their local semantics."""
        m = self.model(model)
        vocab = m.vocab()
        found = vocab.chat_template() if vocab is not None else TemplateInfo(source="", origin="")
        # A server's model is the embedded default only by name, and only with no local file to read instead.
        default_weights = m.config.path is None and model == DEFAULT_MODEL
        return choose_template(model, m.config, found, default_weights)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> RemoteGeneration:
        m = self.model(model)
        m.check_length("prompt", prompt, m.config.context_length)
        count = len(m.tokenize(prompt))
        if count == 0:
            raise InvalidInput("prompt is empty and this model adds no beginning-of-sequence token")
        check_prompt_fits(count, m.config.context_length)
        body = m.request_body(prompt, count, params)
        return RemoteGeneration(m, body, GenerationText(params.stop, count, params.max_tokens))

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(
        self, model: str, texts: Sequence[EmbeddingInput], check: Callable[[], None] | None = None
    ) -> EmbeddingsResult:
        """One request for all texts (REMOTE_EMBEDDING_BATCH at most), or one a text where the server kind needs it
        (`check` runs before each: the server does a request's work in one piece). Token-id inputs go as token ids
        (OpenAI's `input` takes them), in requests of their own: a request's `input` is all texts or all token
        lists."""
        check_embedding_texts(texts)  # as the local engine checks them
        m = self.model(model)
        for i, text in enumerate(texts):
            if isinstance(text, str):
                m.check_length(f"text[{i}]", text, m.config.context_length)
            elif not text:
                raise InvalidInput(f"inputs[{i}] is empty: an embedding needs at least one token")
        if m.kind.embeds_one_per_request:
            batches = [[text] for text in texts]
        else:
            runs = [list(run) for _, run in groupby(texts, key=lambda t: isinstance(t, str))]
            batches = [
                run[i : i + REMOTE_EMBEDDING_BATCH] for run in runs for i in range(0, len(run), REMOTE_EMBEDDING_BATCH)
            ]
        vectors: list[list[float]] = []
        tokens = 0
        for batch in batches:
            if check is not None:
                check()
            url, response = m.call("the embeddings request", _embeddings_request(m.remote_name, batch))
            part = embeddings_result(url, response, len(batch))
            vectors += part.embeddings
            tokens += part.prompt_token_count
        return EmbeddingsResult(embeddings=vectors, prompt_token_count=tokens)

    def open_sequence(self, model: str) -> RemoteSequence:
        return RemoteSequence(self.model(model))

    def close(self) -> None:
        self._models.close()


def _embeddings_request(model: str, texts: list[EmbeddingInput]) -> Callable[[Any], Any]:
    return lambda client: client.embeddings.create(model=model, input=texts, encoding_format="float")


def embeddings_result(url: str, response: Any, count: int) -> EmbeddingsResult:
    """The embeddings of a server's response, one vector per text in input order. A server that returns one vector
    per token (llama-cpp-python's for a causal model) gets them mean-pooled and L2-normalized, as the local engine
    pools. Anything of another shape is `runtime-error` naming the server and the field."""

    def malformed(field: str, what: str) -> EngineError:
        return EngineError(f"{url} sent a malformed embeddings response: `{field}` {what}")

    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != count:
        got = f"has {len(data)} items" if isinstance(data, list) else f"is {type(data).__name__}, not a list"
        raise malformed("data", f"{got} for {count} texts")
    vectors: dict[int, list[float]] = {}
    for i, item in enumerate(data):
        index = getattr(item, "index", i)
        if not isinstance(index, int) or not 0 <= index < count or index in vectors:
            raise malformed(f"data[{i}].index", f"is {index!r}: not a new text index below {count}")
        field = f"data[{i}].embedding"
        vectors[index] = _pooled(getattr(item, "embedding", None), field, malformed)
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "prompt_tokens", 0)
    return EmbeddingsResult(
        embeddings=[vectors[i] for i in range(count)], prompt_token_count=tokens if isinstance(tokens, int) else 0
    )


def _pooled(value: Any, field: str, malformed: Callable[[str, str], EngineError]) -> list[float]:
    """One vector from a pooled vector (a list of numbers) or from per-token vectors (a list of such lists)."""
    if not isinstance(value, list) or not value:
        raise malformed(field, f"is {type(value).__name__ if not isinstance(value, list) else 'empty'}, not a vector")
    rows = value if all(isinstance(row, list) for row in value) else [value]
    width = len(rows[0])
    for row in rows:
        if len(row) != width or not width or not all(isinstance(x, int | float) and math.isfinite(x) for x in row):
            raise malformed(field, f"holds {str(row)[:60]}: not finite numbers of one width")
    if len(rows) == 1 and rows[0] is value:
        return [float(x) for x in value]
    mean = [sum(column) / len(rows) for column in zip(*rows, strict=True)]
    norm = math.sqrt(sum(x * x for x in mean)) or 1.0
    return [x / norm for x in mean]
