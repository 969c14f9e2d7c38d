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

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.domain.types import (
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    ModelInfo,
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
        self._models.close()
