"""The engine protocol every backend implements (llama.cpp, the deterministic fake, later remote ones)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

from llmhost.config import ModelConfig
from llmhost.domain import types as dt
from llmhost.domain.errors import EngineError, ModelNotSupported

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo


T = TypeVar("T")


def configured(items: Mapping[str, T], model: str) -> T:
    """`items[model]`, else `ModelNotSupported` naming the configured models: the one place that says so, for the
    registry and every backend."""
    item = items.get(model)
    if item is None:
        raise ModelNotSupported(
            f"model {model!r} is not configured; known models: {', '.join(items)} (add it under [models] in the config)"
        )
    return item


class Closable(Protocol):
    def close(self) -> None: ...


M = TypeVar("M", bound=Closable)


class Models(Generic[M]):
    """A backend's model objects, by name: created from their config on first use (under a lock, so once), then
    shared by every call, and closed together."""

    def __init__(self, configs: Mapping[str, ModelConfig], create: Callable[[str, ModelConfig], M]) -> None:
        self.configs = dict(configs)
        self._create = create
        self._made: dict[str, M] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> M:
        config = configured(self.configs, name)
        with self._lock:
            made = self._made.get(name)
            if made is None:
                made = self._made[name] = self._create(name, config)
            return made

    def made(self) -> dict[str, M]:
        """The ones created so far."""
        with self._lock:
            return dict(self._made)

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for model in made:
            model.close()


def _unbounded_check() -> None:
    return None


def _unbounded_spend(count: int) -> None:
    return None


@dataclass(frozen=True)
class Bounds:
    """What bounds work that is not a generation (score, beam search), as a generation is bounded: `check()`
    raises once the run is cancelled or past its deadline (looked at between decode steps and while waiting for a
    slot); `spend(n)` counts n evaluated tokens into the run's token budget and raises when they do not fit."""

    check: Callable[[], None] = _unbounded_check
    spend: Callable[[int], None] = _unbounded_spend


UNBOUNDED = Bounds()


@runtime_checkable
class Generation(Protocol):
    """A running generation: iterate to get chunks, then exactly one `StreamDone`. `close()` cancels it."""

    def __iter__(self) -> Iterator[dt.StreamEvent]: ...

    def __next__(self) -> dt.StreamEvent: ...

    def close(self) -> None: ...


class TokenSequence(Protocol):
    """A token sequence kept across calls (the WIT `sequences.sequence`); methods raise `LlmError`."""

    def text(self) -> str: ...

    def token_ids(self) -> list[int]: ...

    def __len__(self) -> int: ...

    def logprobs(self) -> list[float | None]: ...

    def log_likelihood(self) -> float: ...

    def evaluated_token_count(self) -> int: ...

    def append(self, text: str) -> None: ...

    def append_tokens(self, tokens: list[int]) -> None: ...

    def generate(self, params: dt.InferencingParams) -> dt.InferenceResult: ...

    def generate_stream(self, params: dt.InferencingParams) -> Generation: ...

    def truncate(self, count: int) -> None: ...

    def fork(self) -> TokenSequence: ...

    def score(self, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
        """The log-likelihood of each continuation given the sequence (which is left unchanged)."""
        ...

    def beam_search(self, params: dt.BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[TokenSequence, float]]:
        """Beam search from the sequence: new sequences with their scores, best first."""
        ...

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[dt.TopLogprob]:
        """The `top` most likely next tokens under the raw distribution, best first (the sequence is unchanged)."""
        ...

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[dt.TokenLogprob | None]:
        """Append token ids; each one's logprob after the tokens before it, with `top` alternatives (None: the
        first token of an empty sequence)."""
        ...

    def host_bytes(self) -> int:
        """Host memory this sequence holds (its KV state while swapped out)."""
        ...

    def close(self) -> None: ...


class Engine(Protocol):
    def model_names(self) -> list[str]: ...

    def list_models(self) -> list[dt.ModelInfo]:
        """Every configured model's facts, without loading any (0 for what is unknown until loaded)."""
        ...

    def model_info(self, model: str) -> dt.ModelInfo: ...

    def tokenize(self, model: str, text: str) -> list[int]: ...

    def stream(self, model: str, prompt: str, params: dt.InferencingParams) -> Generation:
        """Validate and start a generation. Raises `LlmError` for bad input before any token is generated."""
        ...

    def infer(self, model: str, prompt: str, params: dt.InferencingParams) -> dt.InferenceResult: ...

    def embeddings(
        self, model: str, texts: Sequence[dt.EmbeddingInput], check: Callable[[], None] | None = None
    ) -> dt.EmbeddingsResult:
        """Texts, or token-id lists taken as they are. `check()` runs between bounded pieces of work and raises
        `LlmError` to stop (cancel, deadline)."""
        ...

    def open_sequence(self, model: str) -> TokenSequence: ...

    def chat_template(self, model: str) -> TemplateInfo:
        """The model's chat template and the token texts it needs; `InvalidInput` naming the config key when the
        model has none."""
        ...

    def close(self) -> None: ...


def collect(generation: Generation, on_chunk: Callable[[dt.StreamChunk], None] | None = None) -> dt.InferenceResult:
    """Run a generation to its end and gather its chunks into one result (what `infer` returns).

    `on_chunk`: the per-token hook, called with every chunk as it is generated (the CLI prints with it)."""
    parts: list[str] = []
    logprobs: list[dt.TokenLogprob] = []
    try:
        for event in generation:
            if isinstance(event, dt.StreamChunk):
                parts.append(event.text)
                logprobs.extend(event.logprobs)
                if on_chunk is not None:
                    on_chunk(event)
            elif isinstance(event, dt.StreamDone):
                return dt.InferenceResult(
                    finish_reason=event.finish_reason, text="".join(parts), usage=event.usage, logprobs=tuple(logprobs)
                )
    finally:
        generation.close()
    raise EngineError("generation ended without a done event")
