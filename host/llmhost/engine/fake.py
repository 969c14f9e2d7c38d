"""A deterministic engine for fast unit tests of host policy (never the only test of a feature).

Tokens are UTF-8 bytes (id = byte + 3; 1 = beginning of sequence, 2 = end of generation). A generation replays
`script` byte by byte, then ends with end-of-generation. Stops, limits and usage go through the same
`GenerationText` bookkeeping as the real backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.domain.types import (
    EmbeddingInput,
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    ModelInfo,
    StreamDone,
    StreamEvent,
    check_embedding_texts,
    check_embedding_tokens,
    check_prompt_fits,
    check_text_length,
    check_tokenize_length,
)
from llmhost.engine.base import TokenSequence, collect, configured
from llmhost.engine.generation import GenerationText

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

BOS, EOG, BYTE_OFFSET = 1, 2, 3

# A small ChatML-like template for tests of the chat plumbing (it knows neither tools nor tool calls).
FAKE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class FakeGeneration:
    def __init__(self, script: bytes, state: GenerationText, context_length: int) -> None:
        self._script = script
        self._state = state
        self._context_length = context_length
        self._position = 0
        self._done = False
        self.closed = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        while not self._done and not self.closed:
            if self._position < len(self._script):
                byte = self._script[self._position : self._position + 1]
                token, eog = byte[0] + BYTE_OFFSET, False
            else:
                byte, token, eog = b"", EOG, True
            self._position += 1
            used = self._state.prompt_token_count + len(self._state.token_ids) + 1
            step = self._state.on_token(token, byte, end_of_generation=eog, context_full=used >= self._context_length)
            if step.finish is not None:
                self._done = True
                self._pending_done = StreamDone(finish_reason=step.finish, usage=self._state.usage)
            if step.chunk is not None:
                return step.chunk
            if self._done:
                break
        if self._done and not self.closed:
            self.closed = True
            return self._pending_done
        raise StopIteration

    def close(self) -> None:
        self.closed = True


class FakeEngine:
    def __init__(
        self,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        script: str = "Hello from the fake engine.",
        context_length: int = 64,
    ) -> None:
        self._models = models
        self._script = script.encode()
        self._context_length = context_length

    def model_names(self) -> list[str]:
        return list(self._models)

    def _check(self, model: str) -> None:
        configured(dict.fromkeys(self._models, True), model)

    def list_models(self) -> list[ModelInfo]:
        return [self.model_info(name) for name in self._models]

    def model_info(self, model: str) -> ModelInfo:
        self._check(model)
        return ModelInfo(name=model, context_length=self._context_length, vocab_size=256 + BYTE_OFFSET)

    def tokenize(self, model: str, text: str) -> list[int]:
        self._check(model)
        check_tokenize_length(text)
        return self._tokens(text)

    @staticmethod
    def _tokens(text: str) -> list[int]:
        return [BOS] + [b + BYTE_OFFSET for b in text.encode()]

    def stream(self, model: str, prompt: str, params: InferencingParams) -> FakeGeneration:
        self._check(model)
        if params.constraint is not None:
            raise InvalidInput('structured output needs the llama-cpp engine (set `engine.kind = "llama-cpp"`)')
        check_text_length("prompt", len(prompt), self._context_length, self._context_length, 1)  # a token a byte
        prompt_tokens = len(self._tokens(prompt))
        check_prompt_fits(prompt_tokens, self._context_length)
        state = GenerationText(params.stop, prompt_tokens, params.max_tokens)
        return FakeGeneration(self._script, state, self._context_length)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(
        self, model: str, texts: Sequence[EmbeddingInput], check: Callable[[], None] | None = None
    ) -> EmbeddingsResult:
        self._check(model)
        check_embedding_texts(texts)
        check_embedding_tokens(texts, 256 + BYTE_OFFSET, model)
        for i, t in enumerate(texts):
            if isinstance(t, str):
                check_text_length(f"text[{i}]", len(t), self._context_length, self._context_length, 1)
        # A vector of the tokens: a token-id input's are its ids, as they are (no BOS added).
        tokens = [self._tokens(t) if isinstance(t, str) else list(t) for t in texts]
        vectors = [[float(len(t)), float(sum(t) % 97)] for t in tokens]
        return EmbeddingsResult(embeddings=vectors, prompt_token_count=sum(len(t) for t in tokens))

    def open_sequence(self, model: str) -> TokenSequence:
        self._check(model)
        raise EngineError('sequences need the llama-cpp engine (set `engine.kind = "llama-cpp"` in the config)')

    def chat_template(self, model: str) -> TemplateInfo:
        from llmhost.engine.chat_template import TemplateInfo

        self._check(model)
        return TemplateInfo(source=FAKE_CHAT_TEMPLATE, origin="the fake engine's template")

    def close(self) -> None:
        pass
